"""The time a campaign's runs will take, before any of them has run: a per-run cost model
calibrated per kind of machine (docs/campaign.md, "The cost model"), and the description of
an estimate (its source and error band) that the dry run, the banner and the ETA print.

seconds(run) = start_s + per_iter_s x iterations + per_unit_s x work,
work = iterations x tokens per rank (seq x micro_batch) x top-k x hidden x MoE layers / 1e6,
plus server_s once per invocation when a backend forks its runs from a server. Once runs have
been measured the estimator (harness.campaign.progress.EtaEstimator) scales this prior by the
measured/prior ratio of those runs (the canaries first), or uses the measured history of the
same work where there is one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from harness.api.registry import CLUSTER_KIND
from harness.launch.slurm_time import parse_time_limit
from harness.runbook.model import Runbook
from harness.vocab import run_iterations, run_phase

CPU_KIND = "cpu"


@dataclass(frozen=True)
class KindRate:
    """The calibrated cost of one run on one kind of machine, and where it was measured."""

    kind: str
    start_s: float          # per run: process start, rendezvous, first collective
    per_iter_s: float       # per iteration: the collectives' fixed cost
    per_unit_s: float       # per work unit (see the module docstring)
    server_s: float         # once per invocation whose backends fork from a server
    band: tuple[float, float]   # actual / estimated at the start: the bench's bound, met so far
    measured: str           # where, when, under what load
    load_ref: float = 0.0   # 1-minute load average the rate was measured at (at its start)
    load_slope: float = 0.0     # duration grows by this fraction per unit of load above it
    report_s: float = 0.0   # the report (audit, figures): fixed seconds ...
    report_per_run_s: float = 0.0   # ... plus these per run of the campaign (cells audited)


# Calibrated by least squares on the 103 runs (the first left out) of the default campaign
# (runbooks/local-cpu.yaml, 4 gloo ranks forked from a server) on the idle 2-core build machine,
# 2026-12-06 (load average 0.0; the code of 223ed55): start 0.226 s, 0.0306 s per iteration,
# 0.0441 s per work unit; the server's import 1.08 s (submit to start of the first run). The
# 2026-12-02 fit (0.197 / 0.0869 / 0.0697, at load 4.5 but declared at 1.4) made the first ETA
# of an idle campaign 1.72x the actual. The load term (0.11 per unit of load above the
# reference) is the 2026-12-02 one: first campaigns at load 1.4, 7.1 and 11.6 ran 1.04x, 1.6x
# and 2.3x. The report: 2.1 s for the 22-run reduced campaign and 6.0 s for the default one
# (104 runs), same machine and day: 1.05 s + 0.048 s per run; since the scan stopped
# zero-filling 4 MiB per log (the report's audit 5.3 -> 2.4 s) the default campaign's report
# took 3.6-3.7 s in three idle runs (2026-12-06, bench_campaign), so both terms are scaled by
# 3.65 / 6.04: 0.63 s + 0.029 s per run (the start term refitted on the same runs, the other
# two held: 0.214 s, unchanged within 0.012 s). The band: docs/campaign.md, "The cost model"
# (bench_eta.py figures).
RATES: dict[str, KindRate] = {
    CPU_KIND: KindRate(kind=CPU_KIND, start_s=0.226, per_iter_s=0.0306, per_unit_s=0.0441,
                       server_s=1.08, band=(0.5, 2.0),
                       measured="default campaign on the idle 2-core build machine, 2026-12-06",
                       load_ref=0.0, load_slope=0.11, report_s=0.63, report_per_run_s=0.029),
}


def load_now() -> float | None:
    """The machine's 1-minute load average (None where the OS does not say)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def machine_kind(rb: Runbook) -> str | None:
    """The kind of machine the runbook's runs use: `cpu` when every backend is the reference
    emulation off the GPU, or megatron-core told `device: cpu`, on the local launcher; None
    (no calibrated kind) otherwise."""
    if rb.launcher != "local":
        return None
    for b in rb.backends:
        if b.kind == CLUSTER_KIND or b.kind not in ("reference", "megatron-core"):
            return None
        options = b.options
        device = options.get("device", "auto") if isinstance(options, dict) \
            else getattr(options, "device", "auto")
        if device == "cuda" or (b.kind == "megatron-core" and device != "cpu"):
            return None
    return CPU_KIND


def forks_from_server(rb: Runbook) -> bool:
    """Whether any backend forks its runs from a server (`launch: forked`)."""
    for b in rb.backends:
        options = b.options
        launch = options.get("launch") if isinstance(options, dict) \
            else getattr(options, "launch", None)
        if launch == "forked":
            return True
    return False


def work_units(rb: Runbook, model: str, purpose: str) -> float:
    """iterations x tokens per rank x top-k x hidden x MoE layers / 1e6 of one run."""
    m = rb.model(model)
    iters = run_iterations(run_phase(rb, purpose), purpose)
    tokens = rb.shape.seq * rb.shape.micro_batch
    return iters * tokens * m.topk * m.hidden * max(1, m.moe_layers) / 1e6


class CostModel:
    """The prior of one runbook's run durations: the kind's calibrated rate, or the runbook's
    own `cell_wall_hours` where no kind is calibrated (a user's estimate, said so)."""

    def __init__(self, rb: Runbook, rate: KindRate | None, load: float | None = None) -> None:
        self.rb = rb
        self.rate = rate
        self.load = load
        self.load_factor = 1.0 if rate is None or load is None else \
            1.0 + rate.load_slope * max(0.0, load - rate.load_ref)

    @classmethod
    def of(cls, rb: Runbook, load: float | None = None) -> CostModel | None:
        """The cost model of `rb`, or None when neither a calibrated kind nor the runbook's
        `cell_wall_hours` gives a prior."""
        kind = machine_kind(rb)
        rate = RATES.get(kind) if kind else None
        if rate is None and rb.cell_wall_hours is None:
            return None
        return cls(rb, rate, load_now() if load is None and rate is not None else load)

    def prior(self, backend: str, model: str, purpose: str) -> float | None:
        """Prior seconds of one run (None for an unknown model)."""
        try:
            self.rb.model(model)
        except (KeyError, ValueError):
            return None
        if self.rate is None:
            return float(self.rb.cell_wall_hours or 0.0) * 3600.0 or None
        r = self.rate
        iters = run_iterations(run_phase(self.rb, purpose), purpose)
        return self.load_factor * (r.start_s + r.per_iter_s * iters
                                   + r.per_unit_s * work_units(self.rb, model, purpose))

    def report_prior(self, runs: int) -> float:
        """Prior seconds of the report of a campaign of `runs` runs (0 without a rate)."""
        if self.rate is None:
            return 0.0
        return self.load_factor * (self.rate.report_s + self.rate.report_per_run_s * runs)

    @property
    def startup_s(self) -> float:
        """One-time seconds of an invocation: the fork server's start where one is used."""
        return self.load_factor * self.rate.server_s \
            if self.rate is not None and forks_from_server(self.rb) else 0.0

    @property
    def band(self) -> tuple[float, float] | None:
        """actual / estimated range measured for this kind (None: a user's estimate)."""
        return self.rate.band if self.rate is not None else None

    def source(self) -> str:
        """What the prior is, in words."""
        if self.rate is None:
            return "runbook cell_wall_hours (your estimate, not a measurement)"
        load = "" if self.load is None else \
            f"; load average {self.load:.1f} now: x{self.load_factor:.2f}"
        return f"cost model, {self.rate.kind} rate ({self.rate.measured}{load})"


def ceiling_hours(rb: Runbook) -> float:
    """slurm.time_limit in hours: what Slurm lets one cell hold, never an estimate."""
    return parse_time_limit(rb.slurm.time_limit)


def band_text(seconds: float | None, band: tuple[float, float] | None, fmt) -> str:
    """'(between A and B)' for an estimate and its band, or '(no error band measured)'."""
    if seconds is None:
        return ""
    if band is None:
        return " (no error band measured)"
    return f" (band x{band[0]:g}..x{band[1]:g}: {fmt(seconds * band[0])} to " \
           f"{fmt(seconds * band[1])})"
