"""epcap report: figures exist as PNGs, every pair and does_not_fit pair is named, numbers are
the TSVs' strings, missing parts degrade to stated lines, bad input exits 2.

The campaign is synthetic (built by `make_sample`): two models x (echo, ultraep selected;
moonep timed only), one lower-bound re-measure, one validation step-up and one does_not_fit.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.io.outdir import OutDir
from harness.report.build import build_report, load_context
from harness.report.demand import build_demand, demand_maps
from harness.report.narrow import REPORT_WIDTH, read_tables

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
N = 2048                                  # S·K = 256 x 8
RANKS, LAYERS, ITERS = 4, 3, 3

SPEC_ATTEMPTS = ("campaign", "model", "backend", "purpose", "attempt", "capacity",
                 "capacity_tag", "uniform_tokens", "budget_tokens", "status", "rows",
                 "malformed_rows", "saturated_rows", "peak_actual_valid_recv",
                 "required_capacity", "cell_dir", "started_utc", "finished_utc", "wall_s")
EXTRA_ATTEMPTS = ("backend_impl", "exit_code", "failure_line")
SPEC_SELECTION = ("campaign", "model", "backend", "required_capacity", "peak_actual_valid_recv",
                  "uniform_tokens", "measured_at_capacity", "selected_capacity",
                  "selected_budget_tokens", "over_provision", "validated", "validate_attempts",
                  "timing_capacity")
SPEC_TIMING = ("campaign", "model", "backend", "timing_capacity", "budget_tokens", "status",
               "trials", "iters", "dispatch_ms_median", "dispatch_ms_p90", "combine_ms_median",
               "combine_ms_p90", "step_cv", "noise_floor_pct", "algbw_gbps", "peak_mem_bytes",
               "cell_dir")
EXTRA_TIMING = ("dispatch_ms_p10", "combine_ms_p10", "timer", "backend_impl")

# (model, backend, purpose, capacity, attempt, peak, status)
CELLS = [
    ("QWEN3_30B", "echo", "measure", "2.00", 1, 2300, "ok"),
    ("QWEN3_30B", "echo", "validate", "1.125", 1, 2300, "ok"),
    ("QWEN3_30B", "ultraep", "measure", "2.00", 1, 2400, "ok"),
    ("QWEN3_30B", "ultraep", "validate", "1.1875", 1, 2400, "ok"),
    ("QWEN2_57B", "echo", "measure", "2.00", 1, 2600, "ok"),
    ("QWEN2_57B", "echo", "validate", "1.3125", 1, 2600, "ok"),
    ("QWEN2_57B", "ultraep", "measure", "2.00", 1, 4096, "lower_bound"),
    ("QWEN2_57B", "ultraep", "measure", "3.00", 2, 4200, "ok"),
    ("QWEN2_57B", "ultraep", "validate", "2.0625", 1, 4224, "drops"),
    ("QWEN2_57B", "ultraep", "validate", "2.125", 2, 4300, "ok"),
]
SELECTION = [
    ("QWEN3_30B", "echo", "1.123047", "2300", "2.00", "1.125", "2304", "1.001739", "true", "1", "1.1875"),
    ("QWEN3_30B", "ultraep", "1.171875", "2400", "2.00", "1.1875", "2432", "1.013333", "true", "1", "1.1875"),
    ("QWEN2_57B", "echo", "1.269531", "2600", "2.00", "1.3125", "2688", "1.033846", "true", "1", "2.125"),
    ("QWEN2_57B", "ultraep", "2.050781", "4200", "3.00", "2.125", "4352", "1.036190", "true", "2", "2.125"),
]
# model, backend, cap, budget, status, d_med, d_p90, c_med, c_p90, noise, d_p10, c_p10
TIMING = [
    ("QWEN3_30B", "echo", "1.1875", "2432", "ok", "1.234", "1.456", "2.01", "2.3", "3.5", "1.1", "1.9"),
    ("QWEN3_30B", "ultraep", "1.1875", "2432", "ok", "1.5", "1.7", "2.05", "2.4", "4.25", "1.4", "1.95"),
    ("QWEN3_30B", "moonep", "1.1875", "2432", "ok", "1.26", "1.5", "3.2", "3.6", "2.0", "1.2", "3.0"),
    ("QWEN2_57B", "echo", "2.125", "4352", "ok", "2.5", "2.9", "4.0", "4.4", "5.0", "2.3", "3.8"),
    ("QWEN2_57B", "ultraep", "2.125", "4352", "ok", "2.45", "2.8", "5.1", "5.6", "5.5", "2.3", "4.9"),
    ("QWEN2_57B", "moonep", "2.125", "4352", "does_not_fit", "", "", "", "", "", "", ""),
]

COMPARISON_COLS = ("campaign", "model", "backend", "baseline", "phase", "launches",
                   "ratio_median", "ci_low", "ci_high", "cv_backend", "cv_baseline", "verdict",
                   "reason")
COMPARISON = [
    ("QWEN3_30B", "ultraep", "echo", "dispatch", "3", "1.215", "1.1", "1.34", "0.02", "0.03",
     "slower", "95% CI [1.1000, 1.3400] above 1"),
    ("QWEN3_30B", "ultraep", "echo", "combine", "3", "1.02", "0.9", "1.15", "0.02", "0.03",
     "indistinguishable", "95% CI [0.9000, 1.1500] includes 1"),
    ("QWEN3_30B", "moonep", "echo", "dispatch", "3", "1.021", "0.7", "1.5", "0.09", "0.03",
     "too_noisy", "cv_backend 0.0900 > max_cv 0.05"),
    ("QWEN3_30B", "moonep", "echo", "combine", "3", "1.59", "1.4", "1.8", "0.02", "0.03",
     "slower", "95% CI [1.4000, 1.8000] above 1"),
    ("QWEN3_30B", "echo~control", "echo", "dispatch", "3", "1.01", "0.95", "1.07", "0.02",
     "0.03", "indistinguishable", "95% CI [0.9500, 1.0700] includes 1"),
    ("QWEN3_30B", "echo~control", "echo", "combine", "3", "1.12", "1.05", "1.2", "0.02",
     "0.03", "slower", "95% CI [1.0500, 1.2000] above 1"),
    ("QWEN2_57B", "moonep", "echo", "dispatch", "0", "", "", "", "", "", "",
     "no usable launch (timing status does_not_fit)"),
]


def cell_name(model, backend, purpose, cap, attempt) -> str:
    """docs/spec.md: results layout cell directory name (tag: '.' -> 'p', at least two decimals)."""
    whole, _, frac = cap.partition(".")
    return f"{model}__{backend}__{purpose}__cap{whole}p{frac.ljust(2, '0')}__a{attempt}"


def demand_rows(budget: int, peak: int) -> list[tuple[int, int, int, int]]:
    """(iter, layer, rank, actual) with max(actual) == min(peak, budget) at iter 1 layer 2 rank 1."""
    rows = []
    for it in range(ITERS):
        for layer in range(LAYERS):
            for rank in range(RANKS):
                actual = N - 150 + 37 * rank + 23 * layer + 11 * it
                if (it, layer, rank) == (1, 2, 1):
                    actual = peak
                rows.append((it, layer, rank, min(actual, budget, max(peak, N - 150))))
    return rows


def write_logs(cell_dir: Path, budget: int, peak: int, drops: bool) -> tuple[int, int]:
    """One log per rank with noise lines, setup rows and dispatch rows; return (rows, saturated)."""
    rows = demand_rows(budget, peak)
    if drops:                                        # a clipped row at a second place
        rows = [(i, la, r, budget if (i, la, r) == (2, 0, 3) else a) for i, la, r, a in rows]
    saturated = sum(1 for *_, a in rows if a >= budget)
    for rank in range(RANKS):
        lines = [f"[rank{rank}]: starting reference backend", "some unrelated noise iter=3"]
        lines.append(f"[rank{rank}]: [MOE_DROP_DEBUG][setup_metadata] iter=0 layer=0 rank={rank} "
                     f"budget={budget} exact_recv_per_rank=[{','.join([str(N)] * RANKS)}]")
        for it, layer, r, actual in rows:
            if r == rank:
                lines.append(f"{rank}: [MOE_DROP_DEBUG][dispatch] iter={it} layer={layer} "
                             f"rank={r} expected_recv={N} actual_valid_recv={actual} "
                             f"budget={budget} observed_loss={N - actual}")
        (cell_dir / f"rank{rank}.log").write_text("\n".join(lines) + "\n")
    return len(rows), saturated


def _tsv(path: Path, columns, rows) -> None:
    path.write_text("\t".join(columns) + "\n" + "".join(
        "\t".join(r.get(c, "") for c in columns) + "\n" for r in rows))


def make_sample(root: Path, extras: bool = True) -> Path:
    """Build a synthetic docs/spec.md: results layout campaign directory under root; return it."""
    res = root / "sample"
    (res / "cells").mkdir(parents=True)
    attempts = []
    for model, backend, purpose, cap, att, peak, status in CELLS:
        name = cell_name(model, backend, purpose, cap, att)
        (res / "cells" / name).mkdir()
        budget = int(float(cap) * N)
        rows, sat = write_logs(res / "cells" / name, budget, peak, status == "drops")
        attempts.append(dict(
            campaign="sample", model=model, backend=backend, purpose=purpose, attempt=str(att),
            capacity=cap, capacity_tag=name.split("__")[3], uniform_tokens=str(N),
            budget_tokens=str(budget), status=status, rows=str(rows), malformed_rows="0",
            saturated_rows=str(sat), peak_actual_valid_recv=str(min(peak, budget)),
            required_capacity=repr(round(min(peak, budget) / N, 6)), cell_dir=f"cells/{name}",
            started_utc="2026-11-29T10:00:00Z", finished_utc="2026-11-29T10:00:05Z",
            wall_s="5.0", backend_impl="reference", exit_code="0", failure_line=""))
    for model, backend, cap, budget, status, *_ in TIMING:
        name = cell_name(model, backend, "time", cap, 1)
        (res / "cells" / name).mkdir()
        dnf = status == "does_not_fit"
        attempts.append(dict(
            campaign="sample", model=model, backend=backend, purpose="time", attempt="1",
            capacity=cap, capacity_tag=name.split("__")[3], uniform_tokens=str(N),
            budget_tokens=budget, status=status, rows="" if dnf else "36",
            malformed_rows="", saturated_rows="", peak_actual_valid_recv="",
            required_capacity="", cell_dir=f"cells/{name}", started_utc="2026-11-29T10:01:00Z",
            finished_utc="2026-11-29T10:01:03Z", wall_s="3.0", backend_impl="reference",
            exit_code="1" if dnf else "0",
            failure_line=("rank0.log:12: torch.OutOfMemoryError: CUDA out of memory | tried"
                          if dnf else "")))
    sel_rows = [dict(zip(SPEC_SELECTION, ("sample",) + s[:2] + (s[2], s[3], str(N)) + s[4:],
                         strict=True)) for s in SELECTION]
    tim_rows = []
    for model, backend, cap, budget, status, dm, d9, cm, c9, nf, d1, c1 in TIMING:
        dnf = status == "does_not_fit"
        tim_rows.append(dict(
            campaign="sample", model=model, backend=backend, timing_capacity=cap,
            budget_tokens=budget, status=status, trials="" if dnf else "3",
            iters="" if dnf else "10", dispatch_ms_median=dm, dispatch_ms_p90=d9,
            combine_ms_median=cm, combine_ms_p90=c9, step_cv="" if dnf else "0.021",
            noise_floor_pct=nf, algbw_gbps="" if dnf else "0.75",
            peak_mem_bytes="" if dnf else "123456789",
            cell_dir=f"cells/{cell_name(model, backend, 'time', cap, 1)}",
            dispatch_ms_p10=d1, combine_ms_p10=c1, timer="perf_counter",
            backend_impl="reference"))
    a_cols = SPEC_ATTEMPTS + (EXTRA_ATTEMPTS if extras else ())
    t_cols = SPEC_TIMING + (EXTRA_TIMING if extras else ())
    _tsv(res / "capacity_attempts.tsv", a_cols, attempts)
    _tsv(res / "capacity_selection.tsv", SPEC_SELECTION, sel_rows)
    _tsv(res / "timing.tsv", t_cols, tim_rows)
    _tsv(res / "comparison.tsv", COMPARISON_COLS, [
        dict(zip(COMPARISON_COLS, ("sample",) + c, strict=True)) for c in COMPARISON])
    (res / "provenance.txt").write_text(
        "harness_version: 0.1.0\nharness_commit: abc1234\nhostnames: node1\n"
        "gpu_model: no-gpu\ntorch: 2.13.0\n"
        "repo.blackwell_run_scripts: e3f7c0b 2026-01-02T03:04:05Z main dirty=false\n")
    t0 = 1_764_410_000.0
    events = [{"ev": "campaign_start", "t": t0, "stage": "preflight"}]
    for i in range(4):
        events.append({"ev": "cell_finish", "t": t0 + 10 * (i + 1), "wall_s": 8.0,
                       "status": "ok", "eta_s": 40.0 - 10 * i, "runs_left": 3 - i,
                       "stage": "measure"})
    events.append({"ev": "campaign_done", "t": t0 + 45})
    (res / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return res


# --------------------------------------------------------------------------- helpers


def md_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table in text as (headers, rows), cells stripped and unescaped, the
    parts of a table split to fit the width joined again (harness.report.narrow)."""
    return [([h.replace("\\|", "|") for h in head],
             [[c.replace("\\|", "|") for c in r] for r in rows])
            for head, rows in read_tables(text)]


def tsv_rows(path: Path) -> list[dict[str, str]]:
    """A TSV as string dicts (the test's own reader, independent of harness.report)."""
    head, *lines = path.read_text().splitlines()
    cols = head.split("\t")
    return [dict(zip(cols, ln.split("\t"), strict=True)) for ln in lines]


def mismatches(report_text: str, res: Path) -> list[str]:
    """Table cells (row keyed by model, backend) whose value no TSV holds for that pair/column."""
    truth: dict[tuple[str, str], list[dict[str, str]]] = {}
    for name in ("capacity_selection.tsv", "timing.tsv"):
        for r in tsv_rows(res / name):
            truth.setdefault((r["model"], r["backend"]), []).append(r)
    bad, compared = [], 0
    for headers, rows in md_tables(report_text):
        if "model" not in headers or "backend" not in headers:
            continue
        for row in rows:
            cell = dict(zip(headers, row, strict=True))
            sources = truth.get((cell["model"], cell["backend"]), [])
            for col, val in cell.items():
                known = [r[col] for r in sources if col in r]
                if col in ("model", "backend") or not known:
                    continue
                compared += 1
                if val not in known:
                    bad.append(f"{cell['model']}/{cell['backend']} {col}: {val!r} not in {known}")
    assert compared > 100, f"too few numbers compared ({compared}): the parser missed tables"
    return bad


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk; asserts the PNG signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def check_report(res: Path, path: Path) -> None:
    """The issue's "must show" on any campaign: PNG figures, every pair, every does_not_fit
    pair, and the report's numbers equal to the TSVs'."""
    text = path.read_text()
    measured = {r["model"] for r in tsv_rows(res / "capacity_attempts.tsv")
                if r["purpose"] == "measure" and r["rows"] not in ("", "0")}
    names = ["fig1_capacity.png", "fig2_overprovision.png", "fig4_timing.png"]
    names += [f"fig3_demand_{m}.png" for m in sorted(measured)]
    for name in names:
        w, h = png_size(path.parent / name)
        assert (path.parent / name).stat().st_size > 10_000 and w > 300 and h > 200, name
        assert f"]({name})" in text, f"{name} not linked (relative) from report.md"
    tables = md_tables(text)
    pairs = {(r["model"], r["backend"]) for n in ("capacity_attempts.tsv", "timing.tsv")
             for r in tsv_rows(res / n) if r["purpose" if "purpose" in r else "status"] != "canary"}
    overview = next(rows for h, rows in tables if h[-1] == "fit")
    assert {(r[0], r[1]) for r in overview} >= pairs
    dnf = {(r["model"], r["backend"]) for n in ("capacity_attempts.tsv", "timing.tsv")
           for r in tsv_rows(res / n) if r["status"] == "does_not_fit"}
    listed = next((rows for h, rows in tables if h == ["model", "backend", "where"]), [])
    assert {(r[0], r[1]) for r in listed} == dnf
    assert {(r[0], r[1]) for r in overview if r[-1] == "DOES NOT FIT"} == dnf
    assert mismatches(text, res) == []
    assert not list(path.parent.glob(".*tmp")), "temp files left behind"


@pytest.fixture
def stub_figures(monkeypatch):
    """Replace drawing by a stub PNG for tests about text only (drawing costs ~1 s a build)."""
    from harness import figures as fg

    def stub(*args):
        from harness.io.atomic import write_bytes_atomic
        from harness.io.outdir import OutFile
        write_bytes_atomic(next(a for a in args if isinstance(a, (Path, OutFile))), PNG_MAGIC)

    for name in ("plot_capacity", "plot_overprovision", "plot_demand", "plot_timing"):
        monkeypatch.setattr(fg, name, stub)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sample campaign and its report, built once for the read-only tests."""
    res = make_sample(tmp_path_factory.mktemp("rep"))
    t0 = time.perf_counter()
    path = build_report(res)
    return res, path, time.perf_counter() - t0


# --------------------------------------------------------------------------- tests


# The sections of report.md in order: (module in harness/report/sections/, the heading it
# writes on the sample campaign; None where the sample gives it nothing to show). A new
# section is one line here.
SECTIONS_IN_ORDER = [
    ("header", "# epcap report: sample"),
    ("answers", "## Answers"),
    ("summary", "## Summary"),
    ("overview", "## Overview"),
    ("selection", "## Capacity selection"),
    ("balance", None),                      # the sample's logs carry no pre_balance_recv
    ("risk", "## Held-out validation and drop risk"),
    ("frontier", None),                     # the sample campaign asked for no frontier
    ("demand", "## Per-rank peak demand"),
    ("forecast", "## Forecast: other EP sizes from the recorded routing"),
    ("timing", "## Timing"),
    ("dnf", "## Does not fit"),
    ("failures", "## Failures by class"),
    ("audit", "## Audit verdict"),
    ("provenance", "## Provenance"),
    ("campaign", "## Campaign time"),
    ("unavailable", "## Parts not available"),
]


def test_sections_are_one_module_each_rendered_in_the_listed_order(built):
    from harness.report import sections
    from harness.report.build import SECTIONS

    names = [n for n, _ in SECTIONS_IN_ORDER]
    assert [m.__name__.rsplit(".", 1)[-1] for m in SECTIONS] == names
    files = {p.stem for p in Path(sections.__file__).parent.glob("*.py")} - {"__init__"}
    assert files == set(names), "every module in sections/ is a section listed in SECTIONS"
    text = built[1].read_text()
    headings = [ln for ln in text.splitlines() if ln.startswith(("# ", "## "))]
    assert headings == [h for _, h in SECTIONS_IN_ORDER if h]


def test_report_on_sample_campaign(built):
    res, path, _ = built
    check_report(res, path)
    assert len(list(path.parent.glob("fig3_demand_*.png"))) == 2


def test_every_line_of_the_report_fits_the_width(built):
    """report.md reads in `less` (README): no line over REPORT_WIDTH, tables and prose alike
    (failed on the report before harness.report.narrow: 13-column tables, 465 characters)."""
    _, path, _ = built
    lines = path.read_text().splitlines()
    assert max(map(len, lines)) <= REPORT_WIDTH, max(lines, key=len)


def test_report_names_every_pair_and_every_does_not_fit(built):
    res, path, _ = built
    tables = md_tables(path.read_text())
    overview = next(rows for h, rows in tables if h[-1] == "fit")
    assert len(overview) == 6
    dnf = next(rows for h, rows in tables if h == ["model", "backend", "where"])
    assert {(r[0], r[1]) for r in dnf} == {("QWEN2_57B", "moonep")}
    # the check itself fails when a pair goes missing from the report
    text = path.read_text().replace("| QWEN2_57B | moonep  |", "| QWEN2_57B | other   |")
    broken = path.parent / "broken.md"
    broken.write_text(text)
    with pytest.raises(AssertionError):
        check_report(res, broken)
    broken.unlink()


def test_numbers_in_report_equal_the_tsvs(built):
    res, path, _ = built
    text = path.read_text()
    assert mismatches(text, res) == []
    # the comparison can fail: a reformatted number is caught
    assert "1.013333" in text
    assert mismatches(text.replace("1.013333", "1.0133"), res) != []
    assert mismatches(text.replace("| 1.234 ", "| 1.23  "), res) != []


def test_emulation_is_named_and_timing_shows_verdicts_with_ci(built):
    _, path, _ = built
    text = path.read_text()
    # prose is wrapped at 100 characters (a quote's lines each start with '>')
    flat = " ".join(" ".join(ln.removeprefix(">").split()) for ln in text.splitlines())
    assert "backend_impl=reference" in flat and "not ECHO, UltraEP or MoonEP" in flat
    assert "EXCEEDS" not in text and "within noise" not in text
    headers, rows = next((h, r) for h, r in md_tables(text) if "dispatch vs echo" in h)
    col = {(r[0], r[1]): dict(zip(headers, r, strict=True)) for r in rows}
    assert col[("QWEN3_30B", "ultraep")]["dispatch vs echo"] == "slower ×1.215"
    assert col[("QWEN3_30B", "moonep")]["dispatch vs echo"] == "too_noisy ×1.021"
    assert col[("QWEN2_57B", "moonep")]["dispatch vs echo"] == "n/a (see above)"
    assert col[("QWEN2_57B", "echo")]["combine vs echo"] == "baseline"
    assert col[("QWEN2_57B", "ultraep")]["dispatch vs echo"] == "n/a: no comparison row"
    # the verdict list above the table carries each CI and reason
    assert "dispatch: slower ×1.215 (95% CI 1.100–1.340)" in flat
    assert ("dispatch: too_noisy ×1.021 (95% CI 0.700–1.500); cv_backend 0.0900 > max_cv "
            "0.05") in flat
    assert "dispatch: n/a: no usable launch (timing status does_not_fit)" in flat


def test_control_that_is_not_indistinguishable_marks_the_table_unreliable(built):
    _, path, _ = built
    text = path.read_text()
    assert "**The whole timing table is unreliable:**" in text
    assert "QWEN3_30B echo~control combine: slower" in text
    assert "QWEN3_30B echo~control dispatch" not in text.split("unreliable:**")[1].split("|")[0]


def test_report_without_comparison_tsv_says_so(tmp_path):
    res = make_sample(tmp_path)
    (res / "comparison.tsv").unlink()
    text = build_report(res).read_text()
    assert "not available: comparison.tsv not found" in text
    assert "n/a: no comparison.tsv" in text and "unreliable" not in text


def test_demand_tsv_is_tidy_and_complete(built):
    res, path, _ = built
    rows = tsv_rows(path.parent / "demand.tsv")
    assert list(rows[0])[:6] == ["run", "iteration", "layer", "rank", "actual_valid_recv",
                                 "budget"]
    attempts = [r for r in tsv_rows(res / "capacity_attempts.tsv")
                if r["purpose"] in ("measure", "validate")]
    assert len(rows) == sum(int(a["rows"]) for a in attempts)
    for a in attempts:
        run = a["cell_dir"].split("/")[-1]
        mine = [int(r["actual_valid_recv"]) for r in rows if r["run"] == run]
        assert max(mine) == int(a["peak_actual_valid_recv"]), run
    assert not any(r["run"].split("__")[2] == "time" for r in rows)


def test_heatmaps_mark_saturation_only_where_it_happened(built):
    res, _, _ = built
    ctx = load_context(res, res / "report")
    with OutDir.open(ctx.out) as ctx.dest:
        _, measured = build_demand(ctx)
    maps = demand_maps(measured)
    assert sorted(maps) == ["QWEN2_57B", "QWEN3_30B"]
    sat = {m.run: int(m.saturated.sum()) for ms in maps.values() for m in ms}
    lb = cell_name("QWEN2_57B", "ultraep", "measure", "2.00", 1)
    assert sat.pop(lb) == 1 and set(sat.values()) == {0}
    m = next(m for m in maps["QWEN3_30B"] if m.backend == "echo")
    assert m.ratio.shape == (RANKS, LAYERS)
    assert m.ratio.max() == pytest.approx(2300 / N) and m.budget_ratio == pytest.approx(2.0)


def test_timing_figure_draws_does_not_fit_placeholder(tmp_path):
    from harness import figures as fg

    pts = [fg.TimePoint("M", "echo", "ok", (1.0, 1.2, 1.5), (2.0, 2.1, 2.5), 3.0),
           fg.TimePoint("M", "moonep", "does_not_fit", (None,) * 3, (None,) * 3, None)]
    fig = fg.plot_timing(pts, tmp_path / "t.png", missing_p10=False)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "does not fit" in texts
    hatched = [p for ax in fig.axes for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 1
    assert png_size(tmp_path / "t.png")[0] > 300


def test_capacity_figure_draws_the_grid(tmp_path):
    from harness import figures as fg

    pts = [fg.CapPoint("M", "echo", 2048, 1.123, 1.125, 1.0017, "1.123", "1.125")]
    fig = fg.plot_capacity(pts, tmp_path / "c.png")
    ax = fig.axes[0]
    ys = sorted({round(line.get_ydata()[0], 9) for line in ax.get_lines()
                 if len(line.get_ydata()) == 2 and line.get_ydata()[0] == line.get_ydata()[1]})
    assert 1.125 in ys and 1.0625 in ys            # k * 128 / 2048 rungs around the points
    assert all(abs(y / (128 / 2048) - round(y / (128 / 2048))) < 1e-9 for y in ys)


def test_optional_columns_absent(tmp_path):
    res = make_sample(tmp_path, extras=False)
    text = build_report(res).read_text()
    assert "backend_impl not recorded" in text
    assert "p10 columns not recorded" in text
    assert (res / "report" / "fig4_timing.png").stat().st_size > 10_000


def test_partial_campaign_without_timing(tmp_path, stub_figures):
    res = make_sample(tmp_path)
    (res / "timing.tsv").unlink()
    text = build_report(res).read_text()
    assert "not available: timing.tsv not found" in text
    # the does_not_fit attempt still shows as a placeholder, never as missing
    assert (res / "report" / "fig4_timing.png").exists()


def test_bad_values_name_file_line_field(tmp_path):
    res = make_sample(tmp_path)
    p = res / "capacity_selection.tsv"
    p.write_text(p.read_text().replace("1.036190", "1.03x"))
    with pytest.raises(BadInput) as err:
        build_report(res)
    assert "capacity_selection.tsv:5: over_provision" in str(err.value)
    t = res / "timing.tsv"
    t.write_text(t.read_text().replace("noise_floor_pct", "noise"))
    p.write_text(p.read_text().replace("1.03x", "1.036190"))
    with pytest.raises(BadInput, match=r"timing.tsv:1: noise_floor_pct"):
        build_report(res)


@pytest.mark.parametrize("edit", ["drop", "add"])
def test_ragged_rows_are_bad_input_with_the_line(tmp_path, edit):
    res = make_sample(tmp_path)
    p = res / "timing.tsv"
    lines = p.read_text().splitlines()
    lines[3] = lines[3].rsplit("\t", 1)[0] if edit == "drop" else lines[3] + "\textra"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInput, match=r"timing.tsv:4: row: \d+ fields where the header has"):
        build_report(res)


def test_not_a_campaign_dir(tmp_path):
    with pytest.raises(BadInput, match="not a campaign results directory"):
        build_report(tmp_path)
    with pytest.raises(BadInput, match="not a directory"):
        build_report(tmp_path / "nope")


def test_cli_exit_codes_and_out_dir(tmp_path):
    res = make_sample(tmp_path)
    out = tmp_path / "elsewhere"
    exe = Path(sys.executable).parent / "epcap"
    ok = subprocess.run([str(exe), "report", str(res), "--out", str(out)],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert (out / "report.md").exists() and "report:" in ok.stdout
    bad = subprocess.run([str(exe), "report", str(tmp_path / "missing")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a directory" in bad.stderr


def test_rebuild_replaces_stale_figures_and_is_fast(built, tmp_path):
    res, _, _ = built
    copy = tmp_path / "copy"
    shutil.copytree(res, copy)
    stale = copy / "report" / "fig3_demand_OLD.png"
    stale.write_bytes(PNG_MAGIC)
    build_report(copy)                   # its speed: tests/benchmarks (no timed asserts here)
    assert not stale.exists()


CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"


@pytest.mark.slow
def test_report_on_a_real_reduced_campaign(tmp_path, tmp_path_factory):
    """The reduced runbook run for real by `epcap run` (the session's shared campaign,
    tests/fixtures/uploads/corpus.py), its report rebuilt in a copy and checked."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("upload_corpus_report", CORPUS_PY)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    res = corpus.copy(corpus.harness_campaign(tmp_path_factory.getbasetemp()), tmp_path / "c")
    path = build_report(res)
    check_report(res, path)


def _selection_cell(text: str, model: str, backend: str, column: str) -> str:
    headers, rows = next((h, r) for h, r in md_tables(text) if "executable (checked)" in h)
    row = next(r for r in rows if r[:2] == [model, backend])
    return dict(zip(headers, row, strict=True))[column]


def test_executable_check_flags_an_off_grid_selection(tmp_path, stub_figures):
    res = make_sample(tmp_path)
    p = res / "capacity_selection.tsv"
    p.write_text(p.read_text().replace("\t1.125\t2304", "\t1.19\t2437"))   # 2437 % 128 != 0
    text = build_report(res).read_text()
    assert _selection_cell(text, "QWEN3_30B", "echo", "executable (checked)") == "NO"
    assert _selection_cell(text, "QWEN3_30B", "ultraep", "executable (checked)") == "yes"
    # the pad multiple is the one the campaign recorded as data (campaign.json), never a
    # re-parse of the runbook: at P = 256, 2432 slots are off the grid
    (res / "runbook.yaml").write_text("campaign: sample\ncapacity: {pad_multiple: 64}\n")
    (res / "campaign.json").write_text('{"pad_multiple": 256}\n')
    text = build_report(res).read_text()
    assert _selection_cell(text, "QWEN3_30B", "ultraep", "executable (checked)") == "NO"
    assert _selection_cell(text, "QWEN2_57B", "ultraep", "executable (checked)") == "yes"
    assert "pad multiple 256: campaign.json" in text


def test_a_figure_that_fails_to_draw_is_stated_not_fatal(tmp_path, monkeypatch, stub_figures):
    from harness import figures as fg

    def boom(*args, **kwargs):
        raise ValueError("synthetic plotting bug")

    monkeypatch.setattr(fg, "plot_timing", boom)
    res = make_sample(tmp_path)
    text = build_report(res).read_text()
    assert "figure fig4_timing.png: drawing failed (ValueError: synthetic plotting bug)" in text
    assert "fig4_timing.png)" not in text
    assert not (res / "report" / "fig4_timing.png").exists()
    assert (res / "report" / "fig1_capacity.png").exists()


def test_timing_table_parts_keep_each_phase_together(built):
    """The timing table is cut where a reader expects (what ran; dispatch p10/median/p90;
    combine p10/median/p90; the verdicts), not where the width ran out (which put
    dispatch_ms_p90 beside combine_ms_p10), and the parts still join into one table."""
    _, path, _ = built
    text = path.read_text()
    section = text[text.index("## Timing"):text.index("\n## ", text.index("## Timing") + 1)]
    lines = section.splitlines()
    heads = [[c.strip() for c in ln.strip().strip("|").split("|")]
             for ln, nxt in zip(lines, lines[1:], strict=False) if ln.startswith("|") and nxt.startswith("|-")]
    for phase in ("dispatch", "combine"):
        assert ["model", "backend", f"{phase}_ms_p10", f"{phase}_ms_median",
                f"{phase}_ms_p90"] in heads, heads
    assert ["model", "backend", "dispatch vs echo", "combine vs echo"] in heads, heads
    joined = next(h for h, _ in md_tables(section) if "dispatch vs echo" in h)
    assert {"status", "dispatch_ms_median", "combine_ms_p90", "combine vs echo"} <= set(joined)


def test_the_a_a_warning_stands_where_the_verdicts_first_appear(built):
    """The summary's table (the first with verdicts) carries the warning, above it."""
    _, path, _ = built
    summary = path.read_text().split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert summary.index("**The verdicts below are unreliable:**") < summary.index("| model")
    assert "QWEN3_30B echo~control combine: slower" in summary


def test_timing_figure_band_is_the_launches_range(tmp_path):
    """Figure 4's band runs from the lowest to the highest launch median (the earlier band,
    median x (1 +- noise floor), ran 0-71 ms while a launch sat at 86 ms)."""
    from harness import figures as fg

    pts = [fg.TimePoint("M", "echo", "ok", (40.0, 50.0, 60.0), (2.0, 2.1, 2.5), 140.0,
                        launches=((20.0, 2.0), (86.0, 2.2), (45.0, 2.1)))]
    fig = fg.plot_timing(pts, tmp_path / "t.png", missing_p10=False)
    bands = [(p.get_y(), p.get_y() + p.get_height()) for ax in fig.axes for p in ax.patches
             if not p.get_hatch() and p.get_alpha() is not None]
    assert (20.0, 86.0) in [(round(a, 6), round(b, 6)) for a, b in bands]
    assert all(lo >= 0 for lo, _ in bands)


def _section(report: str, heading: str) -> str:
    """A section's text with its wrapped lines joined (report.md wraps prose)."""
    body = report.split(heading, 1)[1].split("\n## ", 1)[0]
    return " ".join(body.split())


def test_answers_open_the_report_with_capacity_memory_speed_and_emulation(built):
    """Per model: the largest selected budget against the old 2.00 (4096 slots at N 2048),
    the change in slots and percent, bytes UNKNOWN without the runbook as run (the sample
    has none), the dispatch verdicts in words with ratio and CI, before the Summary.
    Catches the saving counted from another row than the largest selected budget (QWEN3_30B
    echo's 2304 would say 1792 saved), a sign error on a capacity above 2.00 (QWEN2_57B
    costs 256 slots more), and bytes invented without the model's hidden size."""
    _, path, _ = built
    report = path.read_text(encoding="utf-8")
    assert report.index("## Answers") < report.index("## Summary")
    text = _section(report, "## Answers")
    assert ("QWEN3_30B**: selected capacity 1.1875 (echo 1.125, ultraep 1.1875): 4096 → 2432 "
            "slots per rank against 2.00, 1664 saved (-40.6%)") in text
    assert "4096 → 4352 slots per rank against 2.00, 256 more (+6.2%)" in text
    assert text.count("bytes UNKNOWN") == 2
    assert "ultraep slower ×1.22 (95% CI 1.10–1.34)" in text
    assert "moonep: the resolution cannot tell (cv_backend 0.0900 > max_cv 0.05)" in text


@pytest.mark.parametrize("verdict", ["faster", "slower", "indistinguishable", "too_noisy",
                                     "unequal_work", ""])
def test_answer_words_give_no_speed_to_unequal_work(verdict):
    """Only faster/slower state a ratio as a speed; unequal_work says there is no verdict
    and why. Catches unequal work reported as a speed difference."""
    from harness.report.sections.answers import verdict_words

    row = {"backend": "x", "verdict": verdict, "ratio_median": "1.5", "ci_low": "1.2",
           "ci_high": "1.9", "mde": "0.3", "reason": "x status drops, 9 slots dropped"}
    words = verdict_words(row)
    assert ("×1.50" in words) == (verdict in ("faster", "slower"))
    assert ("no verdict, unequal work" in words) == (verdict == "unequal_work")
    if verdict == "unequal_work":
        assert "9 slots dropped" in words


def test_figure_4_labels_an_arm_with_drops_with_its_dropped_slots():
    """Figure 4 draws no time for an arm with drops and names its status and dropped slots,
    as timing.tsv and the Summary state them. Catches a figure that hides the count."""
    from harness.figures import placeholder_label

    assert placeholder_label("drops", 399) == "not timed: drops, 399 slots dropped"
    assert placeholder_label("does_not_fit", None) == "does not fit"
    assert placeholder_label("crash", 0) == "not timed: crash"


# The heatmap's reduction (demand_map_rows) against a plain recount of generated rows, in the
# scanner's FIELDS order: per (rank, layer) the max actual/expected over rows with a non-zero
# uniform share, saturated where any row's actual reached its budget, NaN where a pair has no
# row; the cell's max budget/expected. Seen red with `actual > budget` as saturation and with
# rows of expected_recv 0 kept.
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 3),
                          st.integers(0, 40), st.integers(0, 60), st.integers(0, 60)),
                min_size=1, max_size=60))
def test_the_heatmap_keeps_each_pairs_max_ratio_and_any_saturation(rows):
    import math

    import numpy as np

    from harness.report.demand import demand_map_rows
    from harness.telemetry.lines import FIELDS
    arr = np.array([[{"iter": it, "layer": layer, "rank": rank, "expected_recv": exp,
                      "actual_valid_recv": act, "budget": bud}[f] for f in FIELDS]
                    for it, layer, rank, exp, act, bud in rows], dtype=np.int64)
    got = demand_map_rows(arr)
    kept = [r for r in rows if r[3] > 0]
    if not kept:
        assert got is None
        return
    ratio, sat = {}, {}
    for _, layer, rank, exp, act, bud in kept:
        ratio[rank, layer] = max(ratio.get((rank, layer), -1.0), act / exp)
        sat[rank, layer] = sat.get((rank, layer), False) or act >= bud
    assert got.ranks == sorted({k[0] for k in ratio}) and got.layers == sorted({k[1] for k in ratio})
    for i, rank in enumerate(got.ranks):
        for j, layer in enumerate(got.layers):
            if (rank, layer) in ratio:
                assert got.ratio[i, j] == ratio[rank, layer]
                assert bool(got.saturated[i, j]) == sat[rank, layer]
            else:
                assert math.isnan(got.ratio[i, j]) and not got.saturated[i, j]
    assert got.budget_ratio == max(bud / exp for _, _, _, exp, _, bud in kept)
