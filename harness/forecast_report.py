"""Forecast outputs: forecast.tsv (SPEC section 4), the figure (required and selected capacity
against EP size, per model), and the campaign report's forecast section."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from harness.forecast import COLUMNS
from harness.results import write_table_atomic

FORECAST_TSV = "forecast.tsv"
FORECAST_PNG = "forecast.png"


def write_outputs(out: Path, rows: list[dict], pad_multiple: int = 128) -> None:
    """forecast.tsv and forecast.png in `out` (atomic writes)."""
    out.mkdir(parents=True, exist_ok=True)
    write_table_atomic(out / FORECAST_TSV, COLUMNS, rows)
    plot_forecast(rows, out / FORECAST_PNG, pad_multiple)


def _label(row: dict) -> str:
    mb = f" mb{row['micro_batch']}" if row.get("_micro_batch_given") else ""
    return f"{row['personality']} {row['placement']}{mb} {row['unit']}"


def plot_forecast(rows: list[dict], path: Path, pad_multiple: int = 128) -> None:
    """Required (open) and selected (filled) capacity against EP size; one panel per model."""
    from matplotlib.figure import Figure

    from harness.figures import backend_colors, save_png

    panels: dict[str, list[dict]] = {}
    for r in rows:
        panels.setdefault(r["model"] or Path(r["source"]).name, []).append(r)
    fig = Figure(figsize=(max(6.0, 4.2 * len(panels)), 4.4), layout="constrained")
    axes = fig.subplots(1, max(1, len(panels)), squeeze=False)[0]
    colors = backend_colors([_label(r) for r in rows])
    for ax, (name, pts) in zip(axes, panels.items(), strict=False):
        series: dict[str, list[dict]] = {}
        for r in pts:
            series.setdefault(_label(r), []).append(r)
        for label, rs in series.items():
            rs = sorted(rs, key=lambda r: r["ep"])
            xs = [r["ep"] for r in rs]
            c = colors[label]
            ax.plot(xs, [r["required_capacity"] for r in rs], "o--", mfc="white", mec=c,
                    color=c, lw=1, label=f"{label}: required")
            ax.plot(xs, [float(Decimal(r["selected_capacity"])) for r in rs], "D-", color=c,
                    lw=1.4, label=f"{label}: selected")
        eps = sorted({r["ep"] for r in pts})
        ax.set_xscale("log", base=2)
        ax.set_xticks(eps, [str(e) for e in eps])
        ax.set_xlabel("EP size")
        ax.set_title(f"{name}\nsteps = {pts[0]['steps']}, grid pad {pad_multiple}", fontsize=8)
        ax.legend(fontsize=6)
    axes[0].set_ylabel("capacity = budget / (S'·K)")
    fig.suptitle("Forecast: required and selected capacity against EP size", fontsize=10)
    save_png(fig, path)


def _measure_traces(results_dir: Path) -> dict[tuple[str, str], Path]:
    """The latest measure attempt's routing trace per (model, backend)."""
    from harness.plan import parse_cell_name
    from harness.registry import cluster_trace_dir, routing_trace_file
    from harness.vocab import Purpose

    found: dict[tuple[str, str], tuple[int, Path]] = {}
    recorded = [*results_dir.glob(f"cells/*/{routing_trace_file()}"),
                *(p.parent for p in results_dir.glob(f"cells/*/{cluster_trace_dir()}/"
                                                      "router_trace_rank0.jsonl"))]
    for path in sorted(recorded):
        cell = parse_cell_name(path.parent.name)
        if cell is None or cell.purpose != Purpose.MEASURE:
            continue
        key, attempt = (cell.model, cell.backend), cell.attempt
        if key not in found or attempt > found[key][0]:
            found[key] = (attempt, path)
    return {k: v[1] for k, v in sorted(found.items())}


def _measured_peaks(results_dir: Path) -> dict[str, str]:
    """peak_actual_valid_recv of each attempt row, by cell directory name."""
    from harness.results import ATTEMPTS_TSV, read_rows

    path = results_dir / ATTEMPTS_TSV
    rows = read_rows(path) if path.exists() else []
    return {Path(r.get("cell_dir") or "").name: r.get("peak_actual_valid_recv") or ""
            for r in rows}


def campaign_forecast(results_dir: Path, out: Path, pad_multiple: int = 128) -> list[str]:
    """The report's forecast section: each measure run's recorded routing at EP sizes around
    the campaign's (x1/2, x2, x4 where they divide the experts); writes forecast.tsv/png."""
    from harness.errors import BadInput
    from harness.forecast import neighbour_eps
    from harness.forecast_cli import load_routing, rows_for

    lines = ["## Forecast: other EP sizes from the recorded routing", "",
             "Each reference measure run recorded its routing (`cells/*/routing_trace.jsonl`); "
             "`epcap forecast` replays it at EP sizes around the campaign's with the run's "
             "personality planner, contiguous placement, the step's global batch fixed and "
             "split into equal contiguous shares (docs/forecast.md). Required = peak / N, "
             "selected = the executable grid's rung covering the peak; drop risk = 95% upper "
             "bound per step from the recorded steps, none of which drops at that budget.", ""]
    traces = _measure_traces(results_dir)
    if not traces:
        return lines + ["Not available: no measure cell recorded its routing.", ""]
    measured = _measured_peaks(results_dir)
    table, rows = [], []
    for (model, backend), path in traces.items():
        try:
            header = routing_header(path) if path.is_file() else \
                _cluster_header(results_dir, model, backend)
            routing, own_ep, where = load_routing((str(path),), header.get("experts"), None,
                                                  None)
            got = rows_for(routing, neighbour_eps(own_ep, routing.experts), where, [None],
                           ["contiguous"], [header.get("personality", "raw")], ["slots"],
                           pad_multiple, None, model, header.get("hidden"),
                           {header.get("personality"): header.get("planner_options") or {}})
        except (BadInput, StopIteration, OSError, ValueError) as exc:
            table.append([model, backend, f"not available: {exc}"] + [""] * 8)
            continue
        for r in got:
            r["source"] = str(path.relative_to(results_dir))
            own = r["ep"] == own_ep
            mib = "" if r["buffer_bytes_per_rank"] is None else \
                f"{r['buffer_bytes_per_rank'] / 2**20:.2f}"
            table.append([model, backend, f"{r['ep']}{' (campaign)' if own else ''}",
                          str(r["uniform_tokens"]), str(r["peak_demand"]),
                          measured.get(path.parent.name, "") if own else "",
                          f"{r['required_capacity']:.4f}", r["selected_capacity"],
                          f"{r['over_provision']:.4f}", f"{r['drop_risk_95']:.3f}", mib])
        rows += got
    from harness.report import md_table

    lines += [md_table(["model", "backend", "EP", "N", "forecast peak", "measured peak",
                        "required", "selected", "over-provision", "drop risk 95%",
                        "buffer MiB/rank"], table), ""]
    if rows:
        write_outputs(out, rows, pad_multiple)
        lines += [f"![forecast]({FORECAST_PNG})", "", f"Rows: `{FORECAST_TSV}` (SPEC §4).", ""]
    return lines


def _cluster_header(results_dir: Path, model: str, backend: str) -> dict:
    """What a Megatron trace does not say, from the frozen runbook: experts, hidden, and the
    planner of the backend's library (raw for any other backend)."""
    from harness.forecast import PERSONALITIES
    from harness.runbook import load_runbook

    rb = load_runbook(results_dir / "runbook.yaml")
    spec, cfg = rb.model(model), rb.backend(backend)
    name = cfg.module if cfg.module in PERSONALITIES else "raw"
    return {"experts": spec.experts, "hidden": spec.hidden, "personality": name}


def routing_header(path: Path) -> dict:
    """The header line of an epcap trace (model, hidden, personality as recorded)."""
    import json

    with open(path, encoding="utf-8") as fh:
        return json.loads(fh.readline())


def report_section(ctx) -> list[str]:
    """The forecast section of `epcap report` (ctx: harness.report.Context)."""
    lines = campaign_forecast(ctx.results_dir, ctx.out, ctx.pad[0])
    if f"![forecast]({FORECAST_PNG})" in lines and FORECAST_PNG not in ctx.figures:
        ctx.figures.append(FORECAST_PNG)
    return lines
