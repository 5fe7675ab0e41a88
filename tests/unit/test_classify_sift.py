"""Issue 24 part A: `epcap classify` reads the logs in one pass with the telemetry summary and
the compiled scanner sifts each block (harness.telemetry._scan.sift), so Python reads only
the lines that may hold a signature or a row. These tests hold the compiled reader to the
pure one (and to the line-by-line reader) on generated multi-rank logs, the C canonical-row
rule to judge.row_line on mutated rows, and the anchors to every signature's matches; each
check has a meta-test showing it catch the bug it guards against.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness.api.backend import DEFAULT_FAILURE_PATTERNS
from harness.api.registry import load_backend
from harness.runbook.model import BackendConfig
from harness.taxonomy import judge, prefilter
from harness.taxonomy.judge import (
    classify,
    classify_logs,
    iter_log_events,
    iter_log_lines,
    judge_run,
    row_line,
    run_signatures,
    sift_log_events,
)
from harness.taxonomy.prefilter import Anchors, anchors_of, required_literals
from harness.taxonomy.signatures import (
    NO_LAYOUT,
    Layout,
    Matcher,
    attribute,
    clean,
)
from harness.telemetry import summary as tm
from harness.telemetry.lines import DISPATCH_TAG, SETUP_TAG

REQUIRED = os.environ.get("EPCAP_REQUIRE_COMPILED") == "1"
pytestmark = pytest.mark.skipif(tm.sifter() is None and not REQUIRED,
                                reason="harness.telemetry._scan is not built")
DISPATCH, SETUP = DISPATCH_TAG.encode(), SETUP_TAG.encode()

# Upstream messages (sources in harness/taxonomy/signatures.yaml, per id in the comment).
SIG_LINES = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB. GPU 3 has a "
    "total capacity of 178.35 GiB of which 2.12 GiB is free.",         # pytorch-cuda-alloc
    "torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/"
    "c10d/NCCLUtils.cpp:77, remote process exited or there was a network error, NCCL "
    "version 2.27.3",                                                   # fallout wrappers
    "RuntimeError: CUDA error: an illegal memory access was encountered",   # cuda family
    "[PG ID 0 PG GUID 0(default_pg) Rank 2] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=5, OpType=ALLTOALL_BASE) ran for 600000 milliseconds before timing out.",
    "AssertionError: moe_num_echo_experts must be a multiple of 8",    # python family
    "OSError: [Errno 28] No space left on device",                     # storage-errno
    "slurmstepd: error: *** STEP 42.0 ON gpu-7 CANCELLED AT 2026-12-01T07:31:50 DUE TO TIME "
    "LIMIT ***",                                                        # slurm
    "Paged stash: token drop during MoE token dispatch (over budget) on 2 rank(s). Peak "
    "receive capacity needed was 67457 tokens per rank.",              # megatron overflow
    "NET/IB : Got completion from peer 10.0.0.2<53144> with status=12 opcode=0 len=0 "
    "vendor err 129 (Send) localGid ::ffff:10.0.0.1",                  # nccl net_ib
)


def patterns_of(backend: str) -> dict:
    return load_backend(BackendConfig(backend, "cluster", backend)).failure_patterns()


NO_ANCHOR = {"crash": [r"[A-Z]{3}\d+"]}          # a runbook regex without a literal


def row(k: int, i: int, layer: int = 0, order=None, extra: str = "") -> str:
    fields = {"iter": i, "layer": layer, "rank": k, "expected_recv": 8,
              "actual_valid_recv": 9 + i, "budget": 16}
    keys = order or list(fields)
    return DISPATCH_TAG + "".join(f" {key}={fields[key]}" for key in keys) + extra


COLOUR = "\x1b[31m"
KINDS = ("row", "row", "row", "row", "rowx", "odd", "bad", "setup", "iter", "noise", "sig",
         "spliced", "colour", "split", "long")


def line_of(kind: str, k: int, i: int, field_rank: int) -> str:
    """One line of rank k's output (field_rank: the rank= field of its rows)."""
    sig = SIG_LINES[i % len(SIG_LINES)]
    return {
        "row": row(field_rank, i),
        "rowx": row(field_rank, i, extra=" observed_loss=-3 t=1.5"),
        "odd": row(field_rank, i, order=["layer", "iter", "rank", "expected_recv",
                                         "actual_valid_recv", "budget"]),
        "bad": row(field_rank, i).replace(" budget=16", ""),
        "setup": f"{SETUP_TAG} iter=0 layer=1 rank={field_rank} budget=16",
        "iter": f" iteration {i + 1:8d}/     100 | lm loss: 1.0 |",
        "noise": f"loading checkpoint {i} | lr 1.0e-4 | iteration-free words",
        "sig": sig,
        "spliced": row(field_rank, i) + " " + sig,
        "colour": COLOUR + sig + "\x1b[0m",
        "split": "CUDA error: an illegal " + COLOUR + "memory access was encountered",
        "long": "x" * (300 + 97 * i) + (" " + sig if i % 2 else ""),
    }[kind]


PREFIXES = ("[rank{k}]: ", "[rank{k}]:", "[default{k}]: ", "{k}: ", "")
FILES = ("rank0.log", "rank1.log", "node1.log", "slurm-7.out")
LAYOUTS = (NO_LAYOUT, Layout("node", 4, "test"), Layout("rank", 1, "test"))


@st.composite
def cells(draw):
    """Files of a multi-rank cell: (name, lines, crlf, final newline) each."""
    names = draw(st.lists(st.sampled_from(FILES), min_size=1, max_size=3, unique=True))
    files = []
    for name in names:
        spec = draw(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(KINDS),
                                       st.integers(0, 9), st.sampled_from(PREFIXES),
                                       st.integers(0, 9)), max_size=30))
        lines = [pre.format(k=k) + line_of(kind, k, i, k if mis else (k + 1) % 6)
                 for k, kind, i, pre, mis in spec]
        files.append((name, lines, draw(st.booleans()), draw(st.booleans())))
    return files


def write(folder: Path, files) -> list[Path]:
    paths = []
    for name, lines, crlf, final in files:
        end = "\r\n" if crlf else "\n"
        text = end.join(lines) + (end if final and lines else "")
        (folder / name).write_bytes(text.encode())
        paths.append(folder / name)
    return paths


def verdicts(paths, patterns, layout, state, code):
    """(judge_run in one pass, classify_logs alone) as dicts."""
    v = judge_run(code, state, paths, patterns, layout=layout)
    alone = classify_logs(code, state, paths, patterns, v.summary.rows if v.summary else 0,
                          layout=layout)
    return (v.status, v.outcome.to_dict(), v.summary.to_dict() if v.summary else None,
            alone.to_dict())


def line_reader_applies(files, layout, max_line: int) -> bool:
    """Whether the line-by-line reader must agree too: no over-long line, and every canonical
    row's printer is its rank= field (docs/taxonomy.md, known limits)."""
    for name, lines, _crlf, _final in files:
        for text in lines:
            if len(text.encode()) + 2 > max_line:
                return False
            if row_line().match(text.encode()):
                who, _ = attribute(text, name, layout)
                if who != re.search(r" rank=(\d+)", text).group(1):
                    return False
    return True


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(files=cells(), block=st.sampled_from([64, 211, 4096, 4 << 20]),
       max_line=st.sampled_from([400, 16 << 20]),
       patterns=st.sampled_from(["echo", "ultraep", "none", "no-anchor"]),
       layout=st.sampled_from(LAYOUTS),
       ending=st.sampled_from([("failed", 1), ("timeout", None), ("completed", 0)]))
def test_compiled_and_pure_readers_classify_alike(tmp_path_factory, files, block, max_line,
                                                  patterns, layout, ending):
    """Generated multi-rank cells (rank prefixes, srun labels, node files, rows spliced with
    signatures, colour, CRLF, no final newline, lines longer than a block or than the
    summary's line bound): the compiled one-pass reader, the compiled reader alone and the
    pure readers give the same class, lines, ranks, warnings and summary; with no over-long
    line and consistent rows, so does the line-by-line reader."""
    folder = tmp_path_factory.mktemp("cell")
    paths = write(folder, files)
    pats = {"echo": patterns_of("echo"), "ultraep": patterns_of("ultraep"), "none": None,
            "no-anchor": NO_ANCHOR}[patterns]
    state, code = ending
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(tm, "BLOCK_BYTES", block)
        mp.setattr(tm, "MAX_LINE", max_line)
        compiled = verdicts(paths, pats, layout, state, code)
        mp.setattr(tm, "_compiled", None)
        pure = verdicts(paths, pats, layout, state, code)
    finally:
        mp.undo()
    assert compiled == pure
    assert compiled[1] == compiled[3]        # one pass == the taxonomy reading alone
    if line_reader_applies(files, layout, max_line):
        rows = compiled[2]["rows"] if compiled[2] else 0
        by_line = classify(code, state, iter_log_lines(paths), pats, rows, layout=layout)
        assert compiled[1] == by_line.to_dict()


# ---- the canonical-row rule in C is judge.row_line --------------------------------------

TAGS = (DISPATCH, b"7: [T]", b"[rank9]: X", b"[default", b"[MOE_DROP_DEBUG][dispatch]x")
KEYS = ("iter", "layer", "rank", "expected_recv", "actual_valid_recv", "budget")
ALPHABET = "0123456789 =-.\t\r[]:abcerz_\x1b\u00e9"
INSERTS = (" iter=1", " layer=3", " rank=2", " expected_recv=4", " actual_valid_recv=5",
           " budget=6", " foo=1.5", " x=-3", "  ", " budget=", "1: ", "[rank3]:",
           "[default1]: ", " observed_loss=7", "=", " 5=6", " layers=1", " ranking=2")


@st.composite
def mutated_rows(draw, tag: bytes):
    """A canonical row line (with a launcher prefix), then a few edits anywhere in it."""
    odd = st.sampled_from(["0", "7", "01", "00", "8" * 18, "1" + "0" * 18, "", "-1", "1.5",
                           "\u0663", str(10 ** 19)])
    values = [draw(odd if draw(st.integers(0, 7)) == 7 else
                   st.integers(1, 10 ** 6).map(str)) for _ in range(6)]
    prefix = draw(st.sampled_from(["", "[rank3]:", "[rank3]: ", "[default0]: ", "12: ",
                                   "12: [rank3]: ", "3:", "[rank]: "]))
    text = prefix + tag.decode() + "".join(
        f" {key}={value}" for key, value in zip(KEYS, values, strict=True))
    if draw(st.booleans()):
        text += draw(st.sampled_from([" observed_loss=-5", " a=1 b=2.5", " \t", "\r", " \r",
                                      *(f" x=1 {key}=2" for key in KEYS), " layers=1"]))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        edit = draw(st.sampled_from(["insert", "delete", "replace", "token"]))
        if edit == "delete":
            text = text[:at] + text[at + 1:]
        elif edit == "token":
            text = text[:at] + draw(st.sampled_from(INSERTS)) + text[at:]
        else:
            ch = draw(st.sampled_from(ALPHABET))
            text = text[:at] + ch + text[at + (edit == "replace"):]
    return text.encode()


def sift_kinds(block: bytes, tag: bytes, anchors: Anchors | None) -> dict[int, str]:
    """{line index: 'candidate' | 'other'} of the lines sift finds not canonical."""
    exact = None if anchors is None else anchors.exact
    folded = () if anchors is None else anchors.folded
    cand, others, _n = tm.sifter()(block, len(block), tag, SETUP, exact, folded)
    out = {}
    for kind, data in (("candidate", cand), ("other", others)):
        view = memoryview(data).cast("q")
        for k in range(0, len(view), 3):
            out[view[k]] = kind
    return out


def canonical_mismatches(lines: list[bytes], tag: bytes,
                         rule: re.Pattern | None = None) -> list[bytes]:
    """Lines whose canonical-ness sift and judge.row_line (or `rule`) judge differently."""
    rule = rule or row_line(tag.decode())
    found = sift_kinds(b"".join(line + b"\n" for line in lines), tag, Anchors((), ()))
    return [line for i, line in enumerate(lines)
            if (i not in found) != bool(rule.match(line))]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(data=st.data(), tag=st.sampled_from(TAGS))
def test_sift_canonical_rows_are_row_line_matches(data, tag):
    lines = data.draw(st.lists(mutated_rows(tag), min_size=1, max_size=8))
    assert canonical_mismatches(lines, tag) == []


ODD_VALUES = ("0", "7", "01", "00", "8" * 18, "1" + "0" * 18, "", "-1", "1.5", "\u0663",
              "12a", " 5")
PREFIXES_ROW = ("", "[rank3]:", "[rank3]: ", "[rank3]:  ", "[default0]: ", "12: ",
                "12: [rank3]: ", "3:", "[rank]: ", "12:[rank3]: ", " [rank3]: ")
TAILS = ("", " observed_loss=-5", " a=1 b=2.5", " \t", "\r", " \r", "\r ", " x=1.", " x=.5",
         " x=-", " _x9=1", " 9x=1", " x=1\t", " layers=1", " ranking=2",
         *(f" x=1 {key}=2" for key in KEYS), *(f" {key}=2" for key in KEYS))


@pytest.mark.parametrize("tag", TAGS)
def test_every_odd_value_prefix_and_tail_is_judged_as_row_line(tag):
    """Every odd value in every field, every launcher prefix and every tail, one by one
    from a canonical row: sift and judge.row_line agree line by line."""
    good = dict(zip(KEYS, ("3", "2", "1", "8", "9", "16"), strict=True))
    lines = []
    for key in KEYS:
        for value in ODD_VALUES:
            fields = {**good, key: value}
            lines.append(tag + "".join(f" {k}={v}" for k, v in fields.items()).encode())
    body = "".join(f" {k}={v}" for k, v in good.items()).encode()
    lines += [pre.encode() + tag + body + tail.encode() for pre in PREFIXES_ROW
              for tail in TAILS]
    assert canonical_mismatches(lines, tag) == []


def test_canonical_check_catches_a_rule_that_differs():
    """Meta: with a regex that allows a signed iter= value (a rule differing from C's), the
    mutated-row check names the line."""
    line = b"[rank1]: " + DISPATCH + b" iter=-1 layer=2 rank=1 expected_recv=8 " \
                                     b"actual_valid_recv=9 budget=16"
    assert canonical_mismatches([line], DISPATCH) == []
    loose = re.compile(row_line().pattern.replace(rb"iter=\d{1,18}", rb"iter=-?\d{1,18}"))
    assert loose.pattern != row_line().pattern
    assert canonical_mismatches([line], DISPATCH, loose) == [line]


# ---- anchors: every line a signature matches is a candidate ------------------------------

def all_signatures():
    pats = {}
    for backend in ("echo", "ultraep", "moonep"):
        for cls, regexes in patterns_of(backend).items():
            pats.setdefault(cls, []).extend(regexes)
    for cls, regexes in DEFAULT_FAILURE_PATTERNS.items():
        pats.setdefault(cls, []).extend(regexes)
    pats.setdefault("crash", []).extend(FOLDED)   # runbook regexes, case-insensitive
    return run_signatures(pats)


FOLDED = (r"(?i)segmentation fault \(core dumped\)", r"(?i)Illegal Instruction", r"(?i)ÉCHEC")


SIGNATURES = all_signatures()
MATCHER = Matcher(SIGNATURES)
ANCHORS = anchors_of(SIGNATURES)


def missed(anchors: Anchors, texts: list[str]) -> list[str]:
    """The lines a signature matches that sift would not hand to Python."""
    raws = [t.encode("utf-8") for t in texts]
    kinds = sift_kinds(b"".join(r + b"\n" for r in raws), DISPATCH, anchors)
    return [t for i, t in enumerate(texts)
            if MATCHER.match(clean(t)) and kinds.get(i) != "candidate"]


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_signature_match_is_a_candidate_line(data):
    """Lines drawn from each signature's own regex (hypothesis from_regex), with launcher
    prefixes and text around them, are all handed to Python."""
    sig = data.draw(st.sampled_from(SIGNATURES))
    body = data.draw(st.from_regex(sig.regex, fullmatch=True))
    around = st.text(st.characters(blacklist_characters="\n\r",
                                   blacklist_categories=("Cs",)), max_size=12)
    text = (data.draw(st.sampled_from(["", "[rank3]: ", "0: [default1]: "]))
            + data.draw(around) + body + data.draw(around))
    assume("\n" not in text and not any("\ud800" <= c <= "\udfff" for c in text))
    assert ANCHORS is not None
    assert missed(ANCHORS, [text]) == []


def test_anchor_check_catches_a_dropped_anchor():
    """Meta: the upstream lines are all candidates; with every anchor the out-of-memory
    line holds dropped, the check names that line."""
    lines = list(SIG_LINES) + ["[rank3]: " + SIG_LINES[0]]
    assert missed(ANCHORS, lines) == []
    assert ANCHORS.folded                         # the runbook's (?i) regexes
    folded = ["[rank1]: SEGMENTATION FAULT (CORE DUMPED)", "illegal INSTRUCTION at 0x0"]
    assert missed(ANCHORS, folded) == []
    assert missed(Anchors(ANCHORS.exact, ()), folded) == folded
    oom = SIG_LINES[0].encode()
    dropped = Anchors(tuple(a for a in ANCHORS.exact if a not in oom),
                      tuple(a for a in ANCHORS.folded if a not in oom.lower()))
    assert len(dropped.exact) < len(ANCHORS.exact)
    assert {SIG_LINES[0], "[rank3]: " + SIG_LINES[0]} <= set(missed(dropped, lines))


def test_ignorecase_fold_breakers_are_every_ascii_letter_with_a_non_ascii_match():
    """Under IGNORECASE an ASCII letter may match a non-ASCII character (which a byte search
    folded in ASCII would miss): prefilter.FOLD_BREAKERS must list exactly those letters."""
    letters = re.compile("(?i)[a-z]")
    found = set()
    for code in range(0x80, 0x110000):
        ch = chr(code)
        if letters.fullmatch(ch):
            found.update(c for c in "abcdefghijklmnopqrstuvwxyz"
                         if re.fullmatch(f"(?i){c}", ch))
    assert found == set(prefilter.FOLD_BREAKERS)


@pytest.mark.parametrize(("regex", "expected"), [
    (r"torch\.(?:cuda\.)?OutOfMemoryError", {("OutOfMemoryError", False)}),
    (r"(?:CUDA|HIP) error: out of memory", {(" error: out of memory", False)}),
    (r"NCCL error in: \S+:\d+, ", {("NCCL error in: ", False)}),
    (r"(?i)kernel panic", {("ernel pan", True)}),
    (r"\biteration\b", {("iteration", False)}),
    (r"(?:nvshmem|NVSHMEM).*fail", {("nvshmem", False), ("NVSHMEM", False)}),
    (r"[A-Z]{3}\d!", {("!", False)}),
    (r".*", None), (r"(?:boom|\d+)", None), (r"[A-Z]{3}\d+", None),
])
def test_required_literals(regex, expected):
    got = required_literals(re.compile(regex))
    assert (None if got is None else set(got)) == expected


def test_no_anchor_turns_the_prefilter_off():
    """A regex every match of which need not hold a literal: every line is a candidate."""
    sigs = run_signatures(NO_ANCHOR)
    assert anchors_of(sigs) is None
    assert set(sift_kinds(b"plain\nABC1\n", DISPATCH, None).values()) == {"candidate"}


# ---- the quiet stretches, and the one-pass hook -----------------------------------------

SURVIVED = [f"[rank3]: {SIG_LINES[0]}", " iteration        2/     100 | lm loss: 1.0 |",
            *(f"[rank{k}]: {row(k, 1)}" for k in range(4)),
            "[rank3]:  iteration        3/     100 | lm loss: 1.0 |",
            *(f"[rank{k}]: {row(k, 2)}" for k in range(4))]


# A job-level line of slurm-7.out (no rank) is survived by a later unranked iteration line
# of the same file, and only by that file's lines.
JOB_LEVEL = [*(f"[rank{k}]: {row(k, 0)}" for k in range(4)), SIG_LINES[5],
             *(f"[rank{k}]: {row(k, 1)}" for k in range(4)),
             " iteration        2/     100 | lm loss: 1.0 |",
             *(f"[rank{k}]: {row(k, 2)}" for k in range(4))]


@pytest.mark.parametrize(("name", "lines", "mutant"), [
    ("rank0.log", SURVIVED, "skip every quiet stretch"),
    ("slurm-7.out", JOB_LEVEL, "a file: key never rescuable"),
])
def test_a_pending_signature_is_rescued_inside_a_quiet_stretch(tmp_path, monkeypatch, name,
                                                               lines, mutant):
    """A signature followed by progress of its own printer is survived, the progress being
    in a quiet stretch (no candidate line) read because a signature is pending. Meta: a
    reader that skipped those stretches, or never saw a job-level key as rescuable, would
    call it fatal."""
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    rows = tm.summarize([path]).rows
    want = classify(1, "failed", iter_log_events([path]), None, rows)
    got = classify(1, "failed", sift_log_events([path], ANCHORS), None, rows)
    assert got.to_dict() == want.to_dict() and got.warnings_total == 1
    if mutant == "skip every quiet stretch":
        monkeypatch.setattr(judge._Scan, "feed_quiet", lambda self, *a: None)
    else:
        monkeypatch.setattr(judge._Scan, "_rescuable", lambda self, path: any(
            kept for who, kept in self.pending.items() if not who.startswith("file:")))
    broken = classify(1, "failed", sift_log_events([path], ANCHORS), None, rows)
    assert broken.status is not None and broken.warnings_total == 0


def test_summarize_hands_every_line_to_its_observer_once(tmp_path, monkeypatch):
    """The one-pass hook: blocks of whole lines in order, a last line without newline and
    the head of an over-long line given one; on both summary paths."""
    text = b"a\nbb\n" + b"c" * 50 + b"\nd\ne"
    path = tmp_path / "x.log"
    path.write_bytes(text)
    monkeypatch.setattr(tm, "BLOCK_BYTES", 8)
    monkeypatch.setattr(tm, "MAX_LINE", 20)
    for compiled in (True, False):
        if not compiled:
            monkeypatch.setattr(tm, "_compiled", None)
        seen: list = []
        tm.summarize([path], observe=lambda p, b, n, seen=seen: seen.append((n, bytes(b))))
        lines = [(n + i, line) for n, b in seen for i, line in enumerate(b.split(b"\n")[:-1])]
        assert lines == [(1, b"a"), (2, b"bb"), (3, b"c" * 20), (4, b"d"), (5, b"e")]


def test_bench_cell_classifies_alike(tmp_path):
    """The benchmark's shape (8 merged ranks, an out-of-memory tail), small: same answer on
    both paths, through the command's own function."""
    from harness.taxonomy.cli import classify_cell
    cell = tmp_path / "cell"
    cell.mkdir()
    lines = [f"[rank{k}]:{row(k, i, layer)} observed_loss=-{i}" for i in range(30)
             for layer in range(3) for k in range(8)]
    lines += ["[rank3]: Traceback (most recent call last):", f"[rank3]: {SIG_LINES[0]}",
              *(f"[rank{k}]: {SIG_LINES[1]}" for k in (0, 1, 2, 4, 5, 6, 7))]
    (cell / "rank0.log").write_text("\n".join(lines) + "\n")
    (cell / "cell.json").write_text(json.dumps(
        {"cell": {"backend": "none", "purpose": "validate"}, "ntasks": 1, "nodes": 1,
         "gpus_per_node": 8, "launcher": {"state": "failed", "exit_code": 1}}))
    compiled = classify_cell(cell)
    mp = pytest.MonkeyPatch()
    mp.setattr(tm, "_compiled", None)
    try:
        pure = classify_cell(cell)
    finally:
        mp.undo()
    assert compiled == pure
    assert compiled["status"] == "does_not_fit" and compiled["first_failed_rank"] == "3"


class Sifting:
    """An observer that asks the summary for each block's sift (Folder.sift_feed)."""

    sift_with = (ANCHORS.exact, ANCHORS.folded)

    def __init__(self) -> None:
        self.sifted = 0

    def __call__(self, path, lines, first_line, sifted=None) -> None:
        self.sifted += sifted is not None


SETUP_LINES = (SETUP_TAG + " iter=0 layer=1 rank=2 budget=16", "[rank1]:" + SETUP_TAG,
               "noise", "", "[rank2]: " + row(2, 1) + " " + SETUP_TAG + " rank=5")


@settings(max_examples=100, deadline=None, derandomize=True)
@given(lines=st.lists(st.one_of(mutated_rows(DISPATCH), st.sampled_from(SETUP_LINES)
                                .map(str.encode)), max_size=30),
       block=st.sampled_from([64, 4096]), final=st.booleans())
def test_the_one_pass_fold_is_the_fold(tmp_path_factory, lines, block, final):
    """Folding while sifting (canonical lines folded from sift's own parse, the others by
    scan_block) gives the summary Folder.feed gives, rows, malformed lines and setup ranks
    included."""
    path = tmp_path_factory.mktemp("fold") / "rank0.log"
    path.write_bytes(b"\n".join(lines) + (b"\n" if final else b""))
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(tm, "BLOCK_BYTES", block)
        observer = Sifting()
        assert tm.summarize([path], observe=observer).to_dict() == \
            tm.summarize([path]).to_dict()
        assert (observer.sifted > 0) == (b"\n" in path.read_bytes())  # the one-pass path ran
    finally:
        mp.undo()
