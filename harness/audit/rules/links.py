"""The physical limit (`above-link-limit`): no rank moves bytes faster than its GPU's links.

A time cell's `[EPCAP_TIMING]` object states the bytes the busiest rank moved per sample
(`dispatch_bytes_per_rank`, `combine_bytes_per_rank`: remote rows in the busier direction)
and the median times; bytes / median time is the rate it claims. The GPU is the one the
object names (`device_name`, as CUDA names it), else the one the cell's provenance names
(`gpu.model`); its limit is the declared per-direction NVLink bandwidth of
harness/timing/links.py (vendor figures with their sources). A claim above the limit is a
figure no measurement can produce: faster timings re-stated consistently everywhere else
still break it. timing.tsv's own `*_gbps` and `link_gbps` columns are held to the same table
(a row that raises the limit it is judged by, or a rate above it). A GPU outside the table
(CPU emulation) has no limit: not applicable, with the reason, never a guessed figure.
"""

from __future__ import annotations

from harness.audit.model import NOT_APPLICABLE, Check, Rule, Source, Table, Upload, verdict_of
from harness.audit.rules.rederive import as_run, timing_objects
from harness.audit.vocab import ABOVE_LINK_LIMIT
from harness.results.layout import ATTEMPTS_TSV, TIMING_TSV
from harness.timing.links import Link, achieved_gbps, link_of

PHASES = ("dispatch", "combine")
SLACK = 1e-9                  # float slack of a recomputed rate against the limit


def number(value: object) -> float | None:
    """A finite float from a JSON or TSV value, else None."""
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return out if out == out and abs(out) != float("inf") else None


def cell_link(obj: dict, provenance: dict[str, str] | None) -> tuple[Link | None, str]:
    """The declared link of the GPU a time cell ran on: its object's device, else provenance."""
    link, why = link_of(obj.get("device_name") if isinstance(obj.get("device_name"), str)
                        else None)
    if link is not None:
        return link, ""
    named = (provenance or {}).get("gpu.model")
    by_prov, why_prov = link_of(named.split(",")[0] if named else None)
    return (by_prov, "") if by_prov is not None else (None, f"{why}; provenance: {why_prov}")


def object_claims(obj: dict, link: Link) -> list[str]:
    """Each phase whose stated bytes / median time exceeds the link's per-direction limit."""
    out = []
    for ph in PHASES:
        rate = achieved_gbps(number(obj.get(f"{ph}_bytes_per_rank")),
                             number(obj.get(f"{ph}_ms_median")))
        if rate is not None and rate > link.gbps * (1 + SLACK):
            out.append(f"{ph}: {obj.get(f'{ph}_bytes_per_rank')} bytes per rank in "
                       f"{obj.get(f'{ph}_ms_median')} ms = {rate:.1f} GB/s, above {link.kind}'s "
                       f"{link.gbps:g} GB/s per direction ({link.generation})")
    return out


def table_claims(upload: Upload) -> list[str]:
    """timing.tsv rows whose link_gbps is not the declared one, or whose rate is above it."""
    table = upload.tables.get(TIMING_TSV)
    if table is None or not table.rows or "gpu" not in table.columns:
        return []
    out = []
    for row in table.rows:
        link, _ = link_of(row.get("gpu"))
        if link is None:
            continue
        stated = number(row.get("link_gbps"))
        if stated is not None and abs(stated - link.gbps) > SLACK * link.gbps:
            out.append(f"{TIMING_TSV}:{row.line}: link_gbps {row.get('link_gbps')} is not "
                       f"{link.kind}'s declared {link.gbps:g}")
        for ph in PHASES:
            rate = number(row.get(f"{ph}_gbps"))
            if rate is not None and rate > link.gbps * (1 + SLACK):
                out.append(f"{TIMING_TSV}:{row.line}: {ph}_gbps {rate:.1f} above {link.kind}'s "
                           f"{link.gbps:g} GB/s per direction")
    return out


def check_link_limit(table: Table, upload: Upload) -> Check:
    """Every time cell's stated rate, and timing.tsv's, at or below its GPU's link limit."""
    if not as_run(upload):
        return Check(ABOVE_LINK_LIMIT, NOT_APPLICABLE, ["no runbook as run (the earlier layout)"])
    bad, judged, why_not = table_claims(upload), 0, set()
    for key, cell, obj in timing_objects(upload):
        link, why = cell_link(obj, cell.provenance)
        if link is None:
            why_not.add(why)
            continue
        judged += 1
        bad += [f"{key}: {p}" for p in object_claims(obj, link)]
    if not judged and not bad:
        return Check(ABOVE_LINK_LIMIT, NOT_APPLICABLE,
                     sorted(why_not) or ["no time cell with a timing object"])
    return verdict_of(bad, [f"{judged} time cells at or below their GPU's link limit"],
                      ABOVE_LINK_LIMIT, [])


__all__ = ["check_link_limit"]

RULES: tuple[Rule, ...] = (
    Rule(ABOVE_LINK_LIMIT, "a time cell (or timing.tsv row) claims a rate above its GPU's "
         "declared link limit: bytes per rank / median time over the per-direction NVLink "
         "bandwidth of harness/timing/links.py",
         (Source(ATTEMPTS_TSV, ()),), False, check_link_limit,
         "faster timings written into the logs and every table re-derived from them"),
)
