"""`epcap capacity` and `epcap parse`: JSON contracts, human output, bad input, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.errors import BadInput
from harness.grid.cli import cli_capacity
from harness.telemetry.cli import cli_parse

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
SHAPE = ["--seq", "8192", "--mbs", "1", "--topk", "8"]


def epcap(*args: str):
    """Run the click command in-process; return the result (stdout and stderr apart)."""
    return CliRunner().invoke(main, list(args))


def test_capacity_json_exact_and_legacy():
    res = epcap("capacity", *SHAPE, "--peak", "67457", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc == {"uniform_tokens": 65536, "pad_multiple": 128, "peak_tokens": 67457,
                   "required_capacity": 67457 / 65536, "selected_capacity": "1.03125",
                   "budget_tokens": 67584, "over_provision": 67584 / 67457, "decimals": None,
                   "capacity_tag": "cap1p03125"}
    legacy = json.loads(epcap("capacity", *SHAPE, "--required", "1.0293", "--decimals", "2",
                              "--json").stdout)
    assert legacy["peak_tokens"] == 67457 and legacy["selected_capacity"] == "1.25"
    assert legacy["required_capacity"] == 1.0293 and legacy["budget_tokens"] == 81920


def test_required_peak_is_the_exact_ceiling(capsys):
    assert cli_capacity(8192, 1, 8, required=1.0, as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["peak_tokens"] == 65536
    assert cli_capacity(8192, 1, 8, required=1.5, as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["selected_capacity"] == "1.50"


def test_capacity_human_table(capsys):
    assert cli_capacity(8192, 1, 8, peak=67457) == 0
    out = capsys.readouterr().out
    for text in ("65536", "67457", "1.03125", "67584", "1.0019", "cap1p03125", "exact"):
        assert text in out


def test_check_executable_and_not():
    ok = epcap("capacity", *SHAPE, "--check", "1.25", "--json")
    assert ok.exit_code == 0
    assert json.loads(ok.stdout) == {"capacity": "1.25", "budget_tokens": 81920,
                                     "executable": True, "next_executable": "1.25",
                                     "uniform_tokens": 65536, "pad_multiple": 128}
    bad = epcap("capacity", *SHAPE, "--check", "1.02", "--json")
    assert bad.exit_code == 1
    doc = json.loads(bad.stdout)
    assert (doc["executable"], doc["budget_tokens"], doc["next_executable"]) == (False, 66846,
                                                                                "1.02149")
    human = epcap("capacity", *SHAPE, "--check", "1.02")
    assert human.exit_code == 1
    assert "66846" in human.stdout and "NOT executable" in human.stdout
    assert "1.02149" in human.stdout
    assert "executable" in epcap("capacity", *SHAPE, "--check", "2.00").stdout
    legacy = epcap("capacity", *SHAPE, "--check", "1.02", "--decimals", "2", "--json")
    assert json.loads(legacy.stdout)["next_executable"] == "1.25"


@pytest.mark.parametrize(("args", "message"), [
    (["--seq", "0", "--mbs", "1", "--topk", "8", "--peak", "9"], "--seq: must be a positive"),
    (["--seq", "8", "--mbs", "-1", "--topk", "8", "--peak", "9"], "--mbs: must be a positive"),
    (["--seq", "8", "--mbs", "1", "--topk", "0", "--peak", "9"], "--topk: must be a positive"),
    ([*SHAPE, "--peak", "70000", "--pad-multiple", "0"], "--pad-multiple: must be a positive"),
    ([*SHAPE, "--required", "0.99"], "--required: 0.99 is below 1.0"),
    ([*SHAPE, "--required", "nan"], "--required: nan is below 1.0 (or not finite)"),
    ([*SHAPE, "--peak", "65535"], "--peak: 65535 is below the uniform share N=65536"),
    ([*SHAPE, "--peak", "0"], "--peak: 0 is below the uniform share"),
    ([*SHAPE], "give exactly one of --required, --peak, --check (got none)"),
    ([*SHAPE, "--peak", "70000", "--check", "1.25"], "(got --peak, --check)"),
    ([*SHAPE, "--check", "abc"], "capacity 'abc' is not a decimal number"),
    ([*SHAPE, "--check", "-1"], "must be a positive finite number"),
    ([*SHAPE, "--peak", "70000", "--decimals", "-1"], "--decimals: must be >= 0, got -1"),
])
def test_capacity_bad_input_exits_2_naming_the_problem(args, message):
    res = epcap("capacity", *args)
    assert res.exit_code == 2
    assert message in res.stderr
    assert res.stdout == ""


def test_parse_json_is_one_document_with_the_spec_keys():
    log = str(LOGS / "clipped_saturated.log")
    res = epcap("parse", log, "--json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert list(doc) == ["logs"]
    entry = doc["logs"][0]
    spec_keys = ["path", "rows", "setup_rows", "malformed_rows", "malformed_lines",
                 "saturated_rows", "expected_recv", "budget", "peak_actual_valid_recv",
                 "required_capacity", "lower_bound", "ranks", "layers", "iterations", "complete"]
    assert list(entry)[: len(spec_keys)] == spec_keys
    assert (entry["path"], entry["rows"], entry["saturated_rows"], entry["lower_bound"]) == (
        log, 8, 2, True)
    assert entry["required_capacity"] == 1152 / 1024


def test_parse_several_logs_adds_the_combined_run(tmp_path):
    text = (LOGS / "torchrun_interleaved.log").read_text().splitlines(True)
    r0, r1 = tmp_path / "rank0.log", tmp_path / "rank1.log"
    r0.write_text("".join(x for x in text if "rank=0 " in x))
    r1.write_text("".join(x for x in text if "rank=1 " in x))
    doc = json.loads(epcap("parse", str(r0), str(r1), "--json", "--warmup", "1").stdout)
    assert [e["path"] for e in doc["logs"]] == [str(r0), str(r1)]
    assert doc["combined"]["paths"] == [str(r0), str(r1)]
    assert doc["combined"]["rows"] == 8 and doc["combined"]["used_rows"] == 4
    assert doc["combined"]["ranks"] == 2 and doc["combined"]["complete"] is True


def test_parse_no_rows_gives_nulls(tmp_path, capsys):
    log = tmp_path / "noise.log"
    log.write_text("hello\n")
    assert cli_parse((str(log),), as_json=True) == 1     # no telemetry: exit 1 with a hint
    entry = json.loads(capsys.readouterr().out)["logs"][0]
    assert entry["rows"] == 0 and entry["peak_actual_valid_recv"] is None
    assert entry["lower_bound"] is None and entry["required_capacity"] is None


def test_parse_human_output(capsys):
    assert cli_parse((str(LOGS / "truncated_malformed.log"),)) == 0
    out = capsys.readouterr().out
    assert "malformed_rows" in out and "1040" in out
    assert "truncated_malformed.log:6: truncated last line (no newline)" in out


def test_parse_bad_input(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    res = epcap("parse", str(empty))
    assert res.exit_code == 2 and f"{empty}: empty log (0 bytes)" in res.stderr
    res = epcap("parse", str(tmp_path / "missing.log"))
    assert res.exit_code == 2 and "missing.log: no such log file" in res.stderr
    res = epcap("parse", str(LOGS / "srun_label.log"), "--warmup", "-1")
    assert res.exit_code == 2 and "--warmup: must be >= 0" in res.stderr
    with pytest.raises(BadInput, match="not a regular file"):
        cli_parse((str(tmp_path),))
    with pytest.raises(BadInput, match="no log given"):
        cli_parse(())


@pytest.mark.slow
def test_console_script_prints_only_json(tmp_path):
    import subprocess
    import sys

    exe = Path(sys.executable).with_name("epcap")
    out = subprocess.run([str(exe), "parse", str(LOGS / "srun_label.log"), "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["logs"][0]["rows"] == 8 and out.stderr == ""
    bad = subprocess.run([str(exe), "capacity", *SHAPE, "--check", "1.02"], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "next executable: 1.02149" in bad.stdout


def test_parse_json_start_up_imports_no_table_library(tmp_path):
    """`epcap parse --json` never imports rich (its tables cost ~17 ms of start-up, which
    counts in parse's wall time against `grep -c`), numpy, fractions (~3 ms) or importlib.abc (~10 ms, once
    pulled in by the hook below); the rich pipe policy still waits for
    rich.console's first import (test_mech_cli_words covers it on a closed pipe)."""
    import os
    import subprocess
    import sys

    log = tmp_path / "x.log"
    log.write_text("[MOE_DROP_DEBUG][dispatch] iter=0 layer=1 rank=0 expected_recv=4 "
                   "actual_valid_recv=3 budget=8\n")
    code = ("import sys; from harness.cli import main\n"
            "try:\n main(['parse', sys.argv[1], '--json'])\n"
            "except SystemExit as exc:\n"
            " print(exc.code, sorted(m for m in ('rich', 'rich.console', 'numpy', 'fractions', "
            "'importlib.abc') "
            "if m in sys.modules), file=sys.stderr)")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("EPCAP_PURE_PYTHON_PARSE", None)
    res = subprocess.run([sys.executable, "-c", code, str(log)], cwd=root, env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(res.stdout)["logs"][0]["rows"] == 1
    assert res.stderr.split("\n")[-2] == "0 []", res.stderr
