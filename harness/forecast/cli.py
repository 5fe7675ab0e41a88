"""`epcap forecast TRACE...` (docs/spec.md#command-line): read a trace, forecast, write forecast.tsv,
the figure and/or one JSON document. Every refusal is BadInput naming file:line: field."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import numpy as np

from harness.errors import BadInput
from harness.forecast.core import (
    COLUMNS,
    UNITS,
    Forecaster,
    Routing,
    Setting,
    neighbour_eps,
    per_rank_tokens,
    stream_peaks,
)
from harness.grid.capacity import Grid
from harness.io import bounds
from harness.io.boundary.values import bounded_int, int_list
from harness.io.bounds import parse_int
from harness.io.safeio import RUNBOOK_MAX_BYTES, read_text
from harness.loadmodel import planners
from harness.loadmodel import traces as trace_reader
from harness.runbook.zoo import ZOO, zoo_model
from harness.vocab import DEFAULT_PAD_MULTIPLE

BYTES_PER_ELEMENT = 2          # bf16 hidden states, as the reference memory model counts them
NAMED_PLACEMENTS = ("contiguous", "round-robin")


def _names(text: str, option: str, allowed: tuple[str, ...] | None = None) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in names if allowed is not None and x not in allowed]
    if not names or bad:
        raise BadInput(f"expected one or more of {', '.join(allowed or ())}, got {text!r}",
                       field=option)
    return names


def _grid(text: str) -> int | None:
    """exact -> None; decimals-D (also decimals:D) -> D, D at most MAX_DECIMALS."""
    try:
        return Grid.parse(text).decimals
    except ValueError:
        raise BadInput(f"expected exact or decimals-D (D at most {bounds.MAX_DECIMALS}), got "
                       f"{bounds.short_text(text)}", field="--grid") from None


def placement_file(path: str, experts: int) -> dict[int, np.ndarray]:
    """A placement FILE: lines `EP: r0 r1 ... r(E-1)` (the home rank of each expert);
    '#' starts a comment. Every rank must host experts/EP experts."""
    homes: dict[int, np.ndarray] = {}
    lines = read_text(path, max_bytes=RUNBOOK_MAX_BYTES, field="--placement").splitlines()
    for no, text in enumerate(lines, start=1):
        body = text.split("#", 1)[0].strip()
        if not body:
            continue
        head, sep, rest = body.partition(":")
        numbers = [parse_int(x) for x in [head.strip(), *rest.split()]]   # None past 30 digits
        try:
            if None in numbers:
                raise ValueError(body)
            ep, ranks = numbers[0], np.array(numbers[1:], dtype=np.int64)
        except (ValueError, OverflowError):
            raise BadInput("expected `EP: rank rank ...` with integers", path=path, line=no,
                           field="placement") from None
        if not sep or ep <= 0 or ranks.size != experts:
            raise BadInput(f"expected EP then {experts} home ranks", path=path, line=no,
                           field="placement")
        if experts % ep or ranks.min() < 0 or ranks.max() >= ep or \
                (np.bincount(ranks, minlength=ep) != experts // ep).any():
            raise BadInput(f"every rank 0..{ep - 1} must host {experts // ep} experts",
                           path=path, line=no, field="placement")
        if ep in homes:
            raise BadInput(f"EP {ep} placed twice", path=path, line=no, field="placement")
        homes[ep] = ranks
    return homes


def _bad_trace(exc: trace_reader.TraceError) -> BadInput:
    return BadInput(exc.message, path=exc.path, line=exc.line or None, field=exc.field)


def stream_routing(traces: tuple[str, ...], experts: int | None, topk: int | None,
                   seq: int | None):
    """One epcap trace file as a streamed Routing (its calls read once, one step in memory),
    its own EP size and where; None when the trace is not one epcap file."""
    if len(traces) != 1 or Path(traces[0]).is_dir():
        return None
    try:
        got = trace_reader.stream_epcap(str(traces[0]), experts)
    except trace_reader.TraceError as exc:
        raise _bad_trace(exc) from None
    if got is None:
        return None
    trace, calls = got
    where = {"path": trace.paths[0], "line": 1}
    experts = experts or trace.experts
    if topk is not None and trace.topk != topk:
        raise BadInput(f"trace has top-{trace.topk}, the model top-{topk}", field="topk", **where)

    def checked():
        try:
            for step, _layer, ids in calls:
                yield step, ids
        except trace_reader.TraceError as exc:
            raise _bad_trace(exc) from None
    total = trace.ranks * trace.header["tokens"]
    own_ep = trace.header.get("ep") or trace.ranks
    return (Routing(trace.source(), experts, trace.topk, total, checked(),
                    seq or trace.header.get("seq")), own_ep, where)


def load_routing(traces: tuple[str, ...], experts: int | None, topk: int | None,
                 seq: int | None):
    """The trace as a forecast Routing, plus its own EP size (checked: file:line: field)."""
    try:
        trace = trace_reader.read_trace(traces, experts)
    except trace_reader.TraceError as exc:
        raise _bad_trace(exc) from None
    first = min(trace.records.values(), key=lambda r: (r.path, r.line))
    where = {"path": first.path, "line": 1 if trace.fmt == "epcap" else first.line}
    experts = experts or trace.experts
    if experts is None:
        raise BadInput("the trace does not say how many experts: give --model or --experts",
                       field="experts", **where)
    if topk is not None and trace.topk != topk:
        raise BadInput(f"trace has top-{trace.topk}, the model top-{topk}", field="topk", **where)
    total = trace.tokens(trace.steps[0])
    for step in trace.steps:
        if trace.tokens(step) != total:
            rec = trace.records[(step, trace.layers[0], 0)]
            raise BadInput(f"step {step} holds {trace.tokens(step)} tokens, step "
                           f"{trace.steps[0]} {total}: the global batch must be fixed",
                           path=rec.path, line=rec.line, field="num_tokens")
    seq = seq or trace.header.get("seq")
    calls = tuple((s, trace.global_batch(s, la)[0]) for s in trace.steps for la in trace.layers)
    own_ep = trace.header.get("ep") or trace.ranks
    return Routing(trace.source(), experts, trace.topk, total, calls, seq), own_ep, where


def forecast_rows(traces, model=None, experts=None, ep=None, micro_batch=None,
                  placement="contiguous", personality="raw", pad_multiple=DEFAULT_PAD_MULTIPLE,
                  grid="exact", unit="slots", seq=None, zoo: Path = ZOO) -> list[dict]:
    """All rows of one `epcap forecast` call (the CLI options, as values)."""
    if pad_multiple <= 0:
        raise BadInput(f"must be positive, got {pad_multiple}", field="--pad-multiple")
    bounds.check_option("pad-multiple", pad_multiple)     # 10**23 refused before any work
    int_list(ep, "--ep", "ep")                            # before the trace is read
    mbs = int_list(micro_batch, "--micro-batch", "micro_batch")
    bounded_int(experts, "--experts", "experts")
    bounded_int(seq, "--seq", "seq")
    decimals = _grid(grid)
    spec = zoo_model(model, zoo) if model else {}
    if model and experts and int(spec["experts"]) != experts:
        raise BadInput(f"{model} has {spec['experts']} experts, not {experts}", field="--experts")
    experts = experts or (int(spec["experts"]) if spec else None)

    def rows(routing: Routing, own_ep: int, where: dict) -> list[dict]:
        eps = int_list(ep, "--ep", "ep") or neighbour_eps(own_ep, routing.experts)
        return rows_for(routing, eps, where, mbs or [None], _names(placement, "--placement"),
                        _names(personality, "--personality"), _names(unit, "--unit", UNITS),
                        pad_multiple, decimals, model, spec.get("hidden"),
                        recorded_options(traces))
    return streamed_rows(tuple(traces), experts, spec.get("topk"), seq, rows)


def streamed_rows(traces: tuple[str, ...], experts: int | None, topk: int | None,
                  seq: int | None, rows: Callable[[Routing, int, dict], list[dict]]
                  ) -> list[dict]:
    """`rows(routing, own_ep, where)` over the trace streamed one step at a time (one epcap
    file), else (Megatron's files, or records not grouped by step) read whole."""
    streamed = stream_routing(traces, experts, topk, seq)
    if streamed is not None:
        try:
            return rows(*streamed)
        except trace_reader.NotStreamable:
            pass                # read it whole: read_trace names the fault exactly
    return rows(*load_routing(traces, experts, topk, seq))


def rows_for(routing: Routing, eps: list[int], where: dict, mbs: list, placements: list[str],
             personalities: list[str], units: list[str],
             pad_multiple: int = DEFAULT_PAD_MULTIPLE, decimals: int | None = None,
             model: str | None = None, hidden: int | None = None,
             options: dict | None = None) -> list[dict]:
    """Forecast rows for every (personality, unit, placement, EP size, micro-batch)."""
    for e in eps:
        if routing.experts % e:
            raise BadInput(f"{routing.experts} experts do not divide over EP {e}",
                           field="experts", **where)
    if mbs != [None] and routing.seq is None:
        raise BadInput("a micro-batch needs the sequence length: --seq, or a trace header "
                       "with seq", field="--micro-batch")
    files = {p: placement_file(p, routing.experts) for p in placements
             if p not in NAMED_PLACEMENTS}
    jobs = []
    for name in personalities:
        try:
            planner = planners.load_planner(name)
        except ValueError as exc:
            raise BadInput(str(exc), field="--personality") from None
        engine = Forecaster(routing, (options or {}).get(name))
        for u in units:
            for p in placements:
                for e in eps:
                    home = files[p].get(e) if p in files else \
                        np.asarray(planner.home_ranks(routing.experts, e, p))
                    if home is None:
                        raise BadInput(f"no placement for EP {e}", path=p, field="placement")
                    for mb in mbs:
                        per_rank_tokens(routing.tokens, e, mb, routing.seq)
                        jobs.append((engine, Setting(e, mb, p, name, u), home, planner))
    peaks = stream_peaks(routing.calls, jobs)      # one pass over the trace for every row
    return [engine.row_from_peaks(s, got, pad_multiple, decimals, model, hidden,
                                  BYTES_PER_ELEMENT)
            for (engine, s, _home, _planner), got in zip(jobs, peaks, strict=True)]


def recorded_options(traces) -> dict[str, dict]:
    """{personality: planner options} an epcap trace header recorded (the run's planner)."""
    from harness.forecast.outputs import routing_header

    try:
        header = routing_header(Path(traces[0]))
    except (BadInput, OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(header, dict) or not header.get("planner_options"):
        return {}
    return {header.get("personality"): dict(header["planner_options"])}


def json_row(row: dict) -> dict:
    """Numbers as numbers (the selected capacity's decimal string becomes a JSON number)."""
    out = {k: v for k, v in row.items() if not k.startswith("_")}
    out["selected_capacity"] = float(Decimal(row["selected_capacity"]))
    return out


def cli_forecast(traces: tuple[str, ...], model: str | None = None, experts: int | None = None,
                 ep: str | None = None, micro_batch: str | None = None,
                 placement: str = "contiguous", personality: str = "raw",
                 pad_multiple: int = DEFAULT_PAD_MULTIPLE, grid: str = "exact",
                 unit: str = "slots",
                 out: str | None = None, as_json: bool = False, seq: int | None = None) -> int:
    """Forecast; with --out write forecast.tsv and forecast.png; --json prints one document."""
    rows = forecast_rows(traces, model, experts, ep, micro_batch, placement, personality,
                         pad_multiple, grid, unit, seq)
    if out:
        from harness.forecast.outputs import write_outputs

        write_outputs(Path(out), rows, pad_multiple)
    if as_json:
        print(json.dumps({"forecasts": [json_row(r) for r in rows]}, indent=2))
    else:
        keys = ("ep", "micro_batch", "placement", "personality", "unit", "peak_demand",
                "required_capacity", "selected_capacity", "over_provision", "drop_risk_95")
        print("\t".join(keys))
        for r in rows:
            print("\t".join("" if r[k] is None else (f"{r[k]:.4f}" if isinstance(r[k], float)
                                                      else str(r[k])) for k in keys))
    return 0


__all__ = ["COLUMNS", "cli_forecast", "forecast_rows"]
