"""Mechanism: every line copied from a log into a record (events, cell.json, STOPPED.txt, a
TSV row, the terminal) is cut to harness.io.bounds.LOG_LINE_MAX characters at its source
(the taxonomy's Hit; the Slurm launcher's memory-kill line), however long the log line."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .conftest import run_cli

BOUND = 500        # harness.io.bounds.LOG_LINE_MAX, as docs/reliability.md states it
SIGNATURE_LINES = [
    "AssertionError: routing table corrupt {pad}",
    "[rank{pad}]: RuntimeError: CUDA error: an illegal memory access was encountered",
    "Paged stash: token drop during MoE token dispatch (over budget) on 1 rank(s). {pad}",
    "torch.OutOfMemoryError: CUDA out of memory. {pad}",
    "error: unrecognized arguments: --x={pad}",
]
PAD = st.one_of(st.integers(0, 50), st.integers(400, 700), st.integers(5000, 300_000)).flatmap(
    lambda n: st.sampled_from(["x", "9", "é", " "]).map(lambda c: c * n))


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(template=st.sampled_from(SIGNATURE_LINES), pad=PAD, state=st.sampled_from(
    ["failed", "completed", "timeout"]), copies=st.integers(1, 3))
@example(template=SIGNATURE_LINES[0], pad="x" * 5_000_000, state="failed", copies=1)
def test_every_copied_log_line_is_bounded(tmp_path, template, pad, state, copies):
    from harness.taxonomy.judge import judge_run
    log = tmp_path / "rank0.log"
    log.write_text((template.format(pad=pad) + "\n") * copies)
    verdict = judge_run(1 if state != "completed" else 0, state, [log], None)
    record = verdict.outcome.to_dict()
    for text in _strings(record):
        assert len(text) <= BOUND + len(str(log)) + 200, len(text)
    if record.get("line"):
        assert len(record["line"]) <= BOUND


def test_a_campaign_copies_a_long_failure_line_bounded(tiny, tmp_path, fake_launcher):
    long_flag = "--note=" + "y" * 100_000             # the assertion line quotes the argv
    text = tiny.read_text().replace(
        "options: {launch: single}}",
        "options: {launch: single}, flags: " + json.dumps([long_flag, "--fake-fail"]) + "}")
    tiny.write_text(text)
    results = tmp_path / "r"
    res = run_cli("run", tiny, "--results", results, timeout_s=60)
    assert res.code == 3, res.text
    root = results / "tiny"
    for line in res.out.splitlines() + res.err.splitlines():
        assert len(line) <= BOUND + 400, len(line)
    stopped = (root / "STOPPED.txt").read_text()
    assert max(map(len, stopped.splitlines())) <= BOUND + 400
    for raw in (root / "events.jsonl").read_text().splitlines():
        for value in _strings(json.loads(raw)):
            assert "y" * (BOUND + 1) not in value
    for cell_json in root.glob("cells/*/cell.json"):          # the argv asked for is kept
        held = _keys_holding(json.loads(cell_json.read_text()), "y" * (BOUND + 1))
        assert all(k.startswith((".argv", ".command")) for k in held), held
    for tsv in root.glob("*.tsv"):
        assert "y" * (BOUND + 1) not in tsv.read_text()


def _keys_holding(value, needle, path=""):
    if isinstance(value, str):
        return [path] if needle in value else []
    if isinstance(value, dict):
        return [k for key, v in value.items() for k in _keys_holding(v, needle, f"{path}.{key}")]
    if isinstance(value, list):
        return [k for i, v in enumerate(value) for k in _keys_holding(v, needle, f"{path}[{i}]")]
    return []
