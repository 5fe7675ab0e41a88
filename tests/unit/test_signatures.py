"""The signature table and the reading of one log line (harness/taxonomy/signatures.py)."""

from __future__ import annotations

import builtins
import errno
import functools
import json
import os
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.taxonomy.signatures import (
    LINE_ORDER,
    TABLE_PATH,
    Matcher,
    clean,
    from_patterns,
    iteration_of,
    load_table,
    parse_table,
    rank_of,
    timestamp_of,
)


def test_rank_from_every_prefix_shape():
    assert rank_of("[rank3]: boom", "all.log") == "3"
    assert rank_of("[rank12]:[E1201 07:31:50.1 x.cpp:1] boom", "all.log") == "12"
    assert rank_of("[default5]: boom", "node0.log") == "5"
    assert rank_of("1: [default5]: boom", "job.out") == "1:5"
    assert rank_of("7: boom", "job.out") == "7"
    assert rank_of("[MOE_DROP_DEBUG][dispatch] iter=1 layer=0 rank=4 x=1", "a.log") == "4"
    assert rank_of("boom", "logs/rank9.log") == "9"
    assert rank_of("boom", "node1.log") is None
    # a rank named later in the message text is not the printer's prefix
    assert rank_of("worker says " + "x" * 80 + " [rank3]: y", "all.log") is None


def test_clean_and_timestamps():
    assert clean("\x1b[1;31m[rank1]: boom\x1b[0m\r") == "[rank1]: boom"
    assert timestamp_of("[rank1]:[E1201 07:31:50.500 ProcessGroupNCCL.cpp:1]") == (12, 1, 27110.5)
    assert timestamp_of("[2026-12-01 07:31:50] NET/IB") == (12, 1, 27110.0)
    assert timestamp_of("2026-12-01T07:31:50,25 x") == (12, 1, 27110.25)
    assert timestamp_of("no time here 12:00") is None


def test_progress_kinds_are_separate():
    progress = load_table().progress
    megatron = iteration_of(" [2026-12-01 07:31:50.1] iteration        7/     100 | x", progress)
    row = iteration_of("[MOE_DROP_DEBUG][dispatch] iter=6 layer=0 rank=0", progress)
    assert megatron[1] == 7 and row[1] == 6 and megatron[0] != row[0]
    assert iteration_of("[MOE_DROP_DEBUG][setup_metadata] iter=0 layer=0 rank=0", progress) is None
    assert iteration_of("skipped iterations: 0", progress) is None


def test_table_has_sources_for_every_signature_and_each_class():
    table = load_table()
    assert {s.cls for s in table.signatures} == set(LINE_ORDER)
    ids = {s["id"] for s in table.sources}
    assert all(s.source in ids for s in table.signatures)
    assert table.for_library("moonep") != table.for_library("ultraep")
    assert len(table.for_library(None)) == len(table.signatures)


def test_line_order_allocation_failure_through_an_assert_macro():
    m = Matcher(load_table().signatures)
    sig, _ = m.match('RuntimeError: Assertion exception (/x/csrc/ultra_ep.cpp:312): p != nullptr'
                     ' && "Failed to allocate NVSHMEM weight buffer"')
    assert sig.cls == "does_not_fit"
    sig, _ = m.match("RuntimeError: Assertion exception (/x/csrc/runtime.cpp:214): n % 16 == 0")
    assert sig.cls == "assert"
    sig, found = m.match("HT FLAT actual recv tokens 70211 > max_recv_tokens_per_rank 65536")
    assert sig.cls == "overflow" and found.group(sig.demand) == "70211"
    sig, _ = m.match("torch.distributed.DistBackendError: NCCL error in: a.cpp:1, unhandled "
                     "system error (run with NCCL_DEBUG=INFO for details)")
    assert (sig.cls, sig.fallout) == ("infra", False)      # the NCCL statement, not the wrapper
    assert m.match("[rank0]: iteration 3/ 9 | lm loss 1.0") is None


def test_bad_tables_and_patterns_are_bad_input():
    with pytest.raises(BadInput, match="unknown signature class"):
        parse_table({"sources": [{"id": "x", "signatures": [{"class": "nope", "regex": "a"}]}]})
    with pytest.raises(BadInput, match=r"sources\.x\.signatures\[0\]"):
        parse_table({"sources": [{"id": "x", "signatures": [{"class": "assert", "regex": "("}]}]})
    with pytest.raises(BadInput, match="unknown failure class"):
        from_patterns({"oops": ["a"]})
    (sig,) = from_patterns({"overflow": [r"need (?P<demand>\d+) slots"]}, source="runbook")
    assert sig.demand == "demand" and sig.source == "runbook"
    (sig,) = from_patterns({"infra": ["(?i)fell off the bus"]})
    assert Matcher([sig]).match("GPU 3 FELL OFF THE BUS")


# -- families enumerated from their source, member by member (issue 24) ---------------------

FAMILY_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "classify" / "families"
STORAGE_ERRNOS = ("ENOSPC", "EDQUOT", "EIO", "EROFS", "ESTALE", "EFBIG")


DUMPED = ("cuda-runtime-errors", "nccl-result-codes", "pytorch-out-of-memory",
          "slurm-step-messages", "slurm-job-states", "megatron-flag-validation",
          "deepep-exceptions", "nccl-alloc-warnings")
FAMILIES = ("cuda-runtime-errors", "nccl-result-codes", "storage-errno",
            "python-top-level-exceptions", "pytorch-out-of-memory", "slurm-step-messages",
            "slurm-job-states", "megatron-flag-validation", "deepep-exceptions",
            "nccl-alloc-warnings")


def torch_oom_types() -> set[str] | None:
    """The out-of-memory exception types the installed torch exports, as tracebacks name
    them (None without torch)."""
    try:
        import torch
    except ImportError:
        return None
    found = set()
    for module in (torch, torch.cuda):
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, BaseException) \
                    and "OutOfMemory" in name:
                found.add(f"{module.__name__}.{name}")
    return found


def enumerated(family: str) -> dict[str, str]:
    """name -> message of every member of a family, read from its source (not the table):
    a dump of the source (families/*.json: libcudart, NCCL init.cc, PyTorch's allocators and
    status tables, Slurm via extract_slurm.py), or the running interpreter and libc."""
    if family in DUMPED:
        doc = json.loads((FAMILY_DIR / f"{family}.json").read_text(encoding="utf-8"))
        return {m["name"]: m["text"] for m in doc["members"]}
    if family == "storage-errno":
        return {name: os.strerror(getattr(errno, name)) for name in STORAGE_ERRNOS}
    if family == "python-top-level-exceptions":
        return {n: n for n, v in vars(builtins).items() if isinstance(v, type)
                and issubclass(v, BaseException) and not issubclass(v, Warning)}
    raise AssertionError(f"no enumeration for family {family}")


# The documented rules (signatures.yaml `rule`), restated here as the oracle the table's rows
# are checked against: a member's row must carry the class its rule gives.
CUDA_INFRA = {
    "cudaErrorInitializationError", "cudaErrorStubLibrary", "cudaErrorInsufficientDriver",
    "cudaErrorCallRequiresNewerDriver", "cudaErrorDevicesUnavailable", "cudaErrorNoDevice",
    "cudaErrorInvalidDevice", "cudaErrorDeviceNotLicensed",
    "cudaErrorSoftwareValidityNotEstablished", "cudaErrorStartupFailure",
    "cudaErrorNoKernelImageForDevice", "cudaErrorECCUncorrectable", "cudaErrorDeviceAlreadyInUse",
    "cudaErrorNvlinkUncorrectable", "cudaErrorContained", "cudaErrorJitCompilerNotFound",
    "cudaErrorUnsupportedPtxVersion", "cudaErrorJitCompilationDisabled",
    "cudaErrorOperatingSystem", "cudaErrorSystemNotReady", "cudaErrorSystemDriverMismatch",
    "cudaErrorCompatNotSupportedOnDevice", "cudaErrorMpsConnectionFailed",
    "cudaErrorMpsRpcFailure", "cudaErrorMpsServerNotReady", "cudaErrorMpsMaxClientsReached",
    "cudaErrorMpsMaxConnectionsReached", "cudaErrorMpsClientTerminated",
    "cudaErrorExternalDevice", "cudaErrorSharedObjectInitFailed",
    "cudaErrorSharedObjectSymbolNotFound", "cudaErrorFileNotFound", "cudaErrorCudartUnloading"}
PY_NONE = {"BaseException", "Exception", "BaseExceptionGroup", "ExceptionGroup", "RuntimeError",
           "OSError", "EnvironmentError", "IOError", "SystemExit", "KeyboardInterrupt",
           "GeneratorExit", "StopIteration", "StopAsyncIteration", "BlockingIOError",
           "ChildProcessError", "InterruptedError", "ProcessLookupError"}
PY_CONNECTION = {"ConnectionError", "BrokenPipeError", "ConnectionAbortedError",
                 "ConnectionRefusedError", "ConnectionResetError", "TimeoutError"}
NCCL_RULE = {"ncclSuccess": "none", "ncclInProgress": "none", "ncclSystemError": "infra",
             "ncclRemoteError": "infra", "ncclUnhandledCudaError": "infra"}


SLURM_STEP_RULE = (("DUE TO TIME LIMIT", "timeout"), ("DUE TO PREEMPTION", "infra"),
                   ("DUE TO NODE FAILURE", "infra"), ("DUE TO JOB REQUEUE", "infra"),
                   ("DUE to SIGNAL", "infra"), ("STEPD TERMINATED", "infra"),
                   # the scheduler enforcing the runbook's memory limit: a configuration
                   # failure (badflag, naming slurm.mem_per_task), never does_not_fit
                   ("oom_kill event", "badflag"), ("exceeded memory limit", "badflag"),
                   ("Out Of Memory", "badflag"), ("Node failure on", "infra"))
SLURM_STATE_RULE = {"TIMEOUT": "timeout", "DEADLINE": "timeout", "NODE_FAIL": "infra",
                    "BOOT_FAIL": "infra", "PREEMPTED": "infra", "OUT_OF_MEMORY": "badflag",
                    "CANCELLED": "cancelled", "REVOKED": "cancelled"}

# Ends whose class the logs decide; every other `none` state is no end at all.
SLURM_ENDS_LOGS_DECIDE = {"COMPLETED", "FAILED", "SPECIAL_EXIT"}


def rule_class(family: str, name: str, text: str = "") -> str:
    """The class the family's documented rule gives a member."""
    if family == "pytorch-out-of-memory":
        return "does_not_fit"
    if family == "megatron-flag-validation":
        return "badflag"
    if family == "nccl-alloc-warnings":
        return "infra" if "not supported" in text else "does_not_fit"
    if family == "deepep-exceptions":
        return {"EP_HOST_ASSERT": "assert", "EP_DEVICE_ASSERT": "assert",
                "cpu-recv-timeout": "infra"}.get(name, "none")
    if family == "slurm-step-messages":
        return next((cls for key, cls in SLURM_STEP_RULE if key in text), "none")
    if family == "slurm-job-states":
        return SLURM_STATE_RULE.get(name, "none")
    if family == "cuda-runtime-errors":
        return {"cudaSuccess": "none", "cudaErrorApiFailureBase": "none",
                "cudaErrorMemoryAllocation": "does_not_fit", "cudaErrorAssert": "assert"}.get(
            name, "infra" if name in CUDA_INFRA else "crash")
    if family == "nccl-result-codes":
        return NCCL_RULE.get(name, "crash")
    if family == "storage-errno":
        return "infra"
    return ("none" if name in PY_NONE else "assert" if name == "AssertionError"
            else "does_not_fit" if name == "MemoryError"
            else "infra" if name in PY_CONNECTION else "crash")


def table_doc() -> dict:
    return yaml.safe_load(TABLE_PATH.read_text(encoding="utf-8"))


def coverage_problems(doc: dict) -> list[str]:
    """What keeps the table from covering every enumerated family member by member: a
    member without its row, a row whose text is not the source's, a line in each print
    format that the matcher classes otherwise (or not at all), a gate the line misses."""
    problems = []
    table = parse_table(doc)
    matcher = Matcher(table.signatures)
    families = {f["id"]: f for f in doc.get("families") or []}
    for fid in FAMILIES:
        fam = families.get(fid)
        if fam is None:
            problems.append(f"{fid}: family missing")
            continue
        rows = {m["name"]: m for m in fam["members"]}
        for name, text in sorted(enumerated(fid).items()):
            row = rows.get(name)
            if row is None:
                problems.append(f"{fid}: {name} has no row")
                continue
            if row["text"] != text:
                problems.append(f"{fid}: {name} text {row['text']!r} is not {text!r}")
            if row["class"] != rule_class(fid, name, text):
                problems.append(f"{fid}: {name}: row class {row['class']} is not the rule's "
                                f"{rule_class(fid, name, text)}")
            if fid == "slurm-job-states":
                problems += state_problems(name, row)
            if row["class"] == "none":
                if not row.get("why"):
                    problems.append(f"{fid}: {name} has no class and no why")
                continue
            for line in member_lines(fam, row):
                got = matcher.match(line)
                if got is None or got[0].cls != row["class"]:
                    problems.append(f"{fid}: {name}: {line!r} -> {got and got[0].cls}")
                if fam.get("gate") and not re.search(fam["gate"], line):
                    problems.append(f"{fid}: {name}: gate misses {line!r}")
        for name in sorted(set(rows) - set(enumerated(fid))):
            problems.append(f"{fid}: {name} is not in the source")
    return problems


def state_problems(name: str, row: dict) -> list[str]:
    """A Slurm job state read by the launcher (harness/launch/slurm.py map_state) and judged
    with no deciding log line must come out as its row's class: `none` rows are no end (the
    launcher keeps polling) or leave the decision to the logs (crash when they say nothing)."""
    from harness.launch.slurm import SlurmState, map_state
    from harness.taxonomy.judge import classify

    state = map_state(SlurmState(name, "1:0", "", "sacct"))
    if state is None:
        got = "none" if name not in SLURM_ENDS_LOGS_DECIDE else "no end"
    else:
        got = classify(1, state, [], None, 0).status
        if name in SLURM_ENDS_LOGS_DECIDE and got == "crash":
            got = "none"                  # an end the logs decide: nothing in them -> crash
    if got != row["class"]:
        return [f"slurm-job-states: {name}: the launcher reads {state!r}, judged {got}, "
                f"row says {row['class']}"]
    return []


def nccl_warn(msg: str) -> str:
    """An NCCL WARN line as NCCL prints it (host:pid:tid [dev] NCCL WARN msg)."""
    return f"node003:2201:2209 [2] NCCL WARN {msg}"


def fill_printf(text: str, words: list[str]) -> str:
    """A line a C format prints, its `%s` filled from `words` in turn."""
    values = iter(words)
    return re.sub(r"%(ps|s|u|d|ld|zu)", lambda m: {
        "ps": "StepId=481516.0", "u": "2", "d": "-9", "ld": "17179869184", "zu": "4096"}.get(
        m.group(1)) or next(values, "x"), text)


def member_lines(fam: dict, row: dict) -> list[str]:
    """One realistic line per print format of a family member."""
    fid, text, name = fam["id"], row["text"], row["name"]
    if not fam.get("formats", ["{text}"]):
        return []                       # a state the launcher reads, printed in no log
    if fid == "pytorch-out-of-memory":
        return [f"[rank1]: RuntimeError: {text} 7.50 GiB", f"1: [default1]: {text}"]
    if fid == "nccl-alloc-warnings":
        return [nccl_warn(fill_printf(text, [])), "[rank2]: " + nccl_warn(fill_printf(text, []))]
    if fid == "deepep-exceptions":
        return ["[rank5]: RuntimeError: " + fill_printf(text, ["/workspace/DeepEP/csrc/deep_ep.cpp",
                                                               "num_ranks <= NUM_MAX_NVL_PEERS"]),
                "[rank5]: " + fill_printf(text, ["/w/csrc/kernels/intranode.cu", "x == 0"])]
    if fid == "megatron-flag-validation":
        return [f'[rank0]:   File "/opt/Megatron-LM/{row["file"]}", line 512, in '
                f'{name.split(":")[1]}', f'  File "/workspace/megatron-lm/{row["file"]}", line 9, '
                f'in {name.split(":")[1]}']
    if fid == "slurm-step-messages":
        if text.startswith("***"):
            words = ["JOB 481516", "node001", "2026-12-01T09:31:50", "Terminated"]
            return ["slurmstepd: error: " + fill_printf(text, words),
                    "slurmstepd-node001: error: " + fill_printf(text, ["STEP 481516.0"] + words[1:])]
        return ["srun: error: " + fill_printf(text, ["node002", "task", "3"]),
                "slurmstepd: error: " + fill_printf(text, ["node002", "tasks", "0-3"])]
    if fid == "cuda-runtime-errors":
        return [f"[rank3]: torch.AcceleratorError: CUDA error: {text}",
                f"node003:2201:2209 [3] include/alloc.h:189 NCCL WARN Cuda failure {1} '{text}'",
                f"[rank3]: CUDA error encountered at: file=a.cu, line=8, Reason={name}:{text}",
                f"[rank3]: RuntimeError: Failed: CUDA error /workspace/DeepEP/csrc/deep_ep.cpp:1"
                f"20 '{text}'", f"[rank3]: RuntimeError: CUDA driver error: {text}"]
    if fid == "nccl-result-codes":
        return [f"[rank1]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/"
                f"torch/csrc/distributed/c10d/NCCLUtils.cpp:77, {text}, NCCL version 2.27.3"]
    if fid == "storage-errno":
        return [f"[rank0]: OSError: [Errno 28] {text}: '/ckpt/iter_0000100/router.pt'"]
    return [f"[rank2]: {name}: something went wrong", f"1: [default2]: {name}"]


def test_every_family_is_covered_member_by_member():
    assert coverage_problems(table_doc()) == []


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_coverage_fails_when_a_member_row_is_removed(data):
    """The coverage check is no tautology: drop any classed member's row (or change its
    class) and it names that member."""
    doc = table_doc()
    fam = data.draw(st.sampled_from(doc["families"]))
    i = data.draw(st.integers(0, len(fam["members"]) - 1))
    member = fam["members"][i]
    if data.draw(st.booleans()) or member["class"] == "none":
        del fam["members"][i]
        assert any(f": {member['name']} has no row" in p for p in coverage_problems(doc))
    else:
        member["class"] = "timeout" if member["class"] != "timeout" else "crash"
        assert any(f": {member['name']}:" in p for p in coverage_problems(doc))


@pytest.mark.parametrize("fid", FAMILIES)
def test_coverage_names_the_removed_member_of_each_family(fid):
    """For each enumerated family, delete one classed member's row from a copy of the table
    and the coverage check names exactly that member; reclass another and it names that
    one."""
    doc = table_doc()
    fam = next(f for f in doc["families"] if f["id"] == fid)
    classed = [i for i, m in enumerate(fam["members"]) if m["class"] != "none"]
    gone = fam["members"].pop(classed[0])
    problems = coverage_problems(doc)
    assert f"{fid}: {gone['name']} has no row" in problems, problems
    other = fam["members"][classed[1] - 1]
    other["class"] = "crash" if other["class"] != "crash" else "timeout"
    assert any(p.startswith(f"{fid}: {other['name']}:") for p in coverage_problems(doc))


SLURM_STEP_ROWS = [m for f in table_doc()["families"] if f["id"] == "slurm-step-messages"
                   for m in f["members"] if m["class"] != "none"]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_slurm_printf_members_match_whatever_fills_them(data):
    """The Slurm members are C formats: any host, job, time or signal text a `%s` takes
    still gives the member's class (generated fills, not the ones written above)."""
    row = data.draw(st.sampled_from(SLURM_STEP_ROWS))
    words = data.draw(st.lists(st.text(st.characters(blacklist_categories=("Cc", "Cs")),
                                       min_size=1, max_size=30), min_size=4, max_size=4))
    line = data.draw(st.sampled_from(["slurmstepd: error: ", "srun: error: ", ""])) + \
        fill_printf(row["text"], words)
    got = table_matcher().match(line)
    assert got is not None and got[0].cls == row["class"], (line, got and got[0])


@functools.cache
def table_matcher() -> Matcher:
    return Matcher(load_table().signatures)


OOM_ROWS = [m for f in table_doc()["families"] if f["id"] == "pytorch-out-of-memory"
            for m in f["members"]]
LINE_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=60)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(OOM_ROWS), LINE_TEXT, LINE_TEXT)
def test_pytorch_oom_members_inside_any_line_are_does_not_fit(row, before, after):
    """Whatever a rank prints around a PyTorch out-of-memory member (generated text), the
    line is does_not_fit, unless the generated text itself states an overflow."""
    got = table_matcher().match(f"{before} {row['text']} {after}")
    assert got is not None and got[0].cls in ("does_not_fit", "overflow"), (row, got)


@settings(max_examples=200, deadline=None)
@given(LINE_TEXT)
def test_part_b_families_do_not_match_lines_without_their_words(text):
    """Generated lines without any member's fixed words match none of the part-B families
    (the printf members' `%s` must not make them match anything)."""
    got = table_matcher().match(text)
    families = {"pytorch-out-of-memory", "slurm-step-messages", "megatron-flag-validation",
                "deepep-exceptions", "nccl-alloc-warnings"}
    assert got is None or got[0].source not in families, (text, got[0].source, got[0].member)


def site_traceback(site: list, doc: dict) -> list[str]:
    """The traceback a Megatron validation site prints on rank 0: the entry's frame, the
    raising function's frame when it is another, the exception line."""
    commit, file_i, entry, function, line, raises = site
    path = f"/opt/Megatron-LM/{doc['files'][file_i]}"
    lines = ["[rank0]: Traceback (most recent call last):",
             '[rank0]:   File "/opt/Megatron-LM/pretrain_gpt.py", line 314, in <module>',
             f'[rank0]:   File "{path}", line {line if function == entry else 7}, in {entry}']
    if function != entry:
        lines.append(f'[rank0]:   File "{path}", line {line}, in {function}')
    return lines + [f"[rank0]: {raises}: --moe-flag-x is not supported with --moe-flag-y"]


def megatron_site_problems(doc_table: dict) -> list[str]:
    """Every assert/raise site of Megatron's flag validation at the pinned commits
    (extract_megatron.py) must make its traceback badflag: its frames' best class by the
    matcher (run order: badflag beats assert and crash; only an overflow ranks above)."""
    doc = json.loads((FAMILY_DIR / "megatron-flag-validation.json").read_text(encoding="utf-8"))
    matcher = Matcher(parse_table(doc_table).signatures)
    order = ("overflow", "badflag", "assert", "does_not_fit", "crash", "infra", "timeout")
    problems = []
    for site in doc["sites"]:
        classes = [got[0].cls for got in map(matcher.match, site_traceback(site, doc)) if got]
        best = min(classes, key=order.index) if classes else None
        if best != "badflag":
            problems.append(f"{doc['commits'][site[0]][:8]} {doc['files'][site[1]]}:{site[4]} "
                            f"in {site[3]} ({site[5]}) -> {best}")
    return problems


def test_every_megatron_validation_site_is_badflag():
    """1556 sites at four commits: all badflag; the judge agrees on one site of each
    (commit, entry, exception type); without the validate_args row every site raised in
    validate_args itself is reported (the check can fail)."""
    assert megatron_site_problems(table_doc()) == []
    doc = json.loads((FAMILY_DIR / "megatron-flag-validation.json").read_text(encoding="utf-8"))
    from harness.taxonomy.judge import classify
    seen = {}
    for site in doc["sites"]:
        seen.setdefault((site[0], site[2], site[5]), site)
    for site in seen.values():
        lines = [("rank0.log", i, t) for i, t in enumerate(site_traceback(site, doc), start=1)]
        assert classify(1, "failed", lines, None, 0).status == "badflag", site
    cut = table_doc()
    fam = next(f for f in cut["families"] if f["id"] == "megatron-flag-validation")
    fam["members"] = [m for m in fam["members"] if m["name"] != "arguments.py:validate_args"]
    missed = megatron_site_problems(cut)
    own = [s for s in doc["sites"] if s[3] == "validate_args"]
    assert len(missed) == len(own) > 100, (len(missed), len(own))


def test_wrapper_carries_the_decision_and_backend_patterns_keep_fallout():
    m = Matcher(load_table().signatures + from_patterns({"infra": [r"NCCL error"]}))
    sig, _ = m.match("[rank3]:[E1201 07:50:01.1 ProcessGroupNCCL.cpp:1] [Rank 3] Watchdog caught "
                     "collective operation timeout: CUDA error: an illegal memory access was "
                     "encountered")
    assert (sig.cls, sig.member, sig.fallout) == ("crash", "cudaErrorIllegalAddress", False)
    sig, _ = m.match("[rank0]: torch.distributed.DistBackendError: NCCL error in: a.cpp:1, "
                     "remote process exited or there was a network error, NCCL version 2.27.3")
    assert (sig.cls, sig.fallout) == ("infra", True)
    # a backend regex alone on a line no fallout signature matches stays non-fallout
    sig, _ = m.match("[rank0]: NCCL error on a line of its own")
    assert (sig.cls, sig.fallout, sig.source) == ("infra", False, "backend")
