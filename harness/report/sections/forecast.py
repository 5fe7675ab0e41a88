"""Section "Forecast: other EP sizes from the recorded routing": each measure run's recorded
routing replayed at EP sizes around the campaign's (through `epcap forecast`'s own code),
with forecast.tsv/png."""

from __future__ import annotations

from pathlib import Path

from harness.forecast.outputs import FORECAST_PNG, FORECAST_TSV, routing_header, write_outputs
from harness.io.outdir import OutDir
from harness.report.inputs import Context, md_table
from harness.results.layout import RUNBOOK_YAML
from harness.vocab import DEFAULT_PAD_MULTIPLE

# the risk column in percent, as the sentences above the table state it ("below 34.8% at 95%")
RISK_HEADER = "drop risk (%, 95% bound)"


def _measure_traces(results_dir: Path) -> dict[tuple[str, str], Path]:
    """The latest measure attempt's routing trace per (model, backend)."""
    from harness.loadmodel.trace_io import ROUTING_TRACE
    from harness.results.layout import ROUTER_TRACE_DIR, parse_cell_name
    from harness.vocab import Purpose

    found: dict[tuple[str, str], tuple[int, Path]] = {}
    recorded = [*results_dir.glob(f"cells/*/{ROUTING_TRACE}"),
                *(p.parent for p in results_dir.glob(f"cells/*/{ROUTER_TRACE_DIR}/"
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
    from harness.results.layout import ATTEMPTS_TSV
    from harness.results.tables import read_rows

    path = results_dir / ATTEMPTS_TSV
    rows = read_rows(path) if path.exists() else []
    return {Path(r.get("cell_dir") or "").name: r.get("peak_actual_valid_recv") or ""
            for r in rows}


def campaign_forecast(results_dir: Path, out: Path | OutDir,
                      pad_multiple: int = DEFAULT_PAD_MULTIPLE) -> list[str]:
    """The report's forecast section: each measure run's recorded routing at EP sizes around
    the campaign's (x1/2, x2, x4 where they divide the experts); writes forecast.tsv/png."""
    from harness.errors import BadInput
    from harness.forecast.cli import rows_for, streamed_rows
    from harness.forecast.core import neighbour_eps

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

            seen: dict[str, int] = {}

            def forecast(routing, own_ep: int, where: dict, header: dict = header,
                     model: str = model, seen: dict = seen) -> list[dict]:
                seen["own_ep"] = own_ep
                return rows_for(routing, neighbour_eps(own_ep, routing.experts), where,
                                [None], ["contiguous"], [header.get("personality", "raw")],
                                ["slots"], pad_multiple, None, model, header.get("hidden"),
                                {header.get("personality"):
                                 header.get("planner_options") or {}})
            got = streamed_rows((str(path),), header.get("experts"), None, None, forecast)
        except (BadInput, StopIteration, OSError, ValueError) as exc:
            table.append([model, backend, f"not available: {exc}"] + [""] * 8)
            continue
        for r in got:
            r["source"] = str(path.relative_to(results_dir))
            own = r["ep"] == seen["own_ep"]
            mib = "" if r["buffer_bytes_per_rank"] is None else \
                f"{r['buffer_bytes_per_rank'] / 2**20:.2f}"
            table.append([model, backend, f"{r['ep']}{' (campaign)' if own else ''}",
                          str(r["uniform_tokens"]), str(r["peak_demand"]),
                          measured.get(path.parent.name, "") if own else "",
                          f"{r['required_capacity']:.4f}", r["selected_capacity"],
                          f"{r['over_provision']:.4f}", f"{100 * r['drop_risk_95']:.1f}", mib])
        rows += got
    lines += [md_table(["model", "backend", "EP", "N", "forecast peak", "measured peak",
                        "required", "selected", "over-provision", RISK_HEADER,
                        "buffer MiB/rank"], table, keys=3), ""]
    if rows:
        write_outputs(out, rows, pad_multiple)
        lines += [f"![forecast]({FORECAST_PNG})", "", f"Rows: `{FORECAST_TSV}` (columns: docs/spec.md#tsv-columns; "
                  "drop_risk_95 there is a fraction).", ""]
    return lines


def _cluster_header(results_dir: Path, model: str, backend: str) -> dict:
    """What a Megatron trace does not say, from the frozen runbook: experts, hidden, and the
    planner of the backend's library (raw for any other backend)."""
    from harness.loadmodel.planners import PERSONALITIES
    from harness.runbook.load import load_runbook

    rb = load_runbook(results_dir / RUNBOOK_YAML)
    spec, cfg = rb.model(model), rb.backend(backend)
    name = cfg.module if cfg.module in PERSONALITIES else "raw"
    return {"experts": spec.experts, "hidden": spec.hidden, "personality": name}


def render(ctx: Context) -> list[str]:
    """The forecast section of `epcap report`; forecast.png joins ctx.figures when drawn."""
    lines = campaign_forecast(ctx.results_dir, ctx.dest, ctx.pad[0])
    if f"![forecast]({FORECAST_PNG})" in lines and FORECAST_PNG not in ctx.figures:
        ctx.figures.append(FORECAST_PNG)
    return lines
