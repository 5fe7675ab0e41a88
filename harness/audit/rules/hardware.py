"""The hardware a cell ran on, as its ranks state it, against what the upload claims
(`hardware-mismatch`). Each rank prints one `[EPCAP_RANK]` line when it has its device
(harness/api/backend.py `rank_line`: rank, world, local_rank, host, device, device_name; read
by harness/io/boundary/logs.py `rank_record`). The claims held to it:

- **world**: every rank of a cell states the same world; a rank is stated once, below the
  world, and `rank<R>.log` holds rank R's line; a run that exited 0 has one rank log per rank
  of the world; the time object's `ranks`, where stated, is that world; cell.json `ntasks`
  (tasks, each starting world / ntasks ranks) divides it and `nodes` is at least the number
  of distinct hosts.
- **device**: a time cell's `[EPCAP_TIMING]` `device_name` (the GPU the link limit reads) is
  the one rank 0 states (the rank that prints the object).
- **hosts and GPUs**: with the local launcher (no container) the ranks ran where the driver
  ran, so every rank's host is one of the cell's provenance `hostnames`. A rank whose host is
  the provenance's ran on that machine's GPUs: its GPU `device_name` is one of `gpu.model`'s,
  and the distinct GPU devices used there number at most `gpu.count` (unless provenance saw
  no GPU tool at all: `gpu.source: none`, which records `no-gpu` without looking).

Not compared: provenance's `env.WORLD_SIZE` and `env.SLURM_*` (the driver's own environment;
a cell's job gets its own), and, under Slurm, its `hostnames` and GPUs (the submitting host's).

Evidence missing is UNKNOWN (an unreadable line; a rank log without a line where its
backend's other cells print one, in a run that exited 0); an upload none of whose logs holds
the line (written before it existed, or by a backend that does not print it) is n/a.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.api.backend import RANK_TAG, TIMING_TAG
from harness.audit.model import (
    NOT_APPLICABLE,
    Cell,
    Check,
    Rule,
    Source,
    Table,
    Upload,
    norm,
    verdict_of,
)
from harness.audit.readers import log_files, numbered_tagged_lines
from harness.audit.rules.conservation import exit_code
from harness.audit.rules.rederive import as_run, timing_objects
from harness.audit.vocab import HARDWARE_MISMATCH
from harness.errors import BadInput, EpcapError
from harness.io.boundary.logs import RankRecord, rank_record
from harness.results.layout import ATTEMPTS_TSV, CELL_JSON
from harness.timing.links import link_of

RANK_LOG = re.compile(r"rank(\d+)\.log")
NO_GPU = ("no-gpu", "")


def same_gpu(stated: str, recorded: str) -> bool:
    """A rank's device_name against one gpu.model name: equal, or one the other's prefix (a
    MIG suffix) naming the same link of harness/timing/links.py (never `H100` for `H100 PCIe`)."""
    # Both are the driver's product name. The rank's: torch.cuda.get_device_name, which
    # returns get_device_properties(device).name, i.e. cudaDeviceProp.name (pytorch/pytorch
    # torch/cuda/__init__.py at cf30153c4c131c8164ee7798e5022d810682e2cb, the 2.13.0 installed
    # here). Provenance's: NVML nvmlDeviceGetName (nvidia-ml-py) or
    # `nvidia-smi --query-gpu=name` (harness/results/provenance.py).
    a, b = norm(stated), norm(recorded)
    if not (a and b) or not (a == b or a.startswith(b + " ") or b.startswith(a + " ")):
        return False
    return link_of(stated)[0] == link_of(recorded)[0]     # never a prefix of another link


@dataclass
class Stated:
    """What one cell's logs state: rank records (with where), the timing line's place."""

    records: list[tuple[str, RankRecord]] = field(default_factory=list)   # (file:line, record)
    rank_logs: dict[int, str] = field(default_factory=dict)              # R -> rank<R>.log path
    timing_at: str | None = None
    unreadable: list[str] = field(default_factory=list)
    unreadable_files: set[str] = field(default_factory=set)


def read_stated(upload: Upload, cell: Cell) -> tuple[Stated | None, str | None]:
    """The cell's `[EPCAP_RANK]` lines and where its `[EPCAP_TIMING]` line is."""
    if cell.where is None or upload.folder is None:
        return None, None
    files, problem = log_files(upload.folder, cell.where)
    if problem:
        return None, f"{cell.path}: {problem}"
    out = Stated()
    for path in files:
        name = f"{cell.path}/{Path(path).name}"
        if (m := RANK_LOG.fullmatch(Path(path).name)) is not None:
            out.rank_logs[int(m.group(1))] = name
        try:
            for line_no, text in numbered_tagged_lines(path, (RANK_TAG, TIMING_TAG)):
                if TIMING_TAG in text:
                    out.timing_at = out.timing_at or f"{name}:{line_no}"
                    continue
                payload = text.split(RANK_TAG, 1)[1]
                try:
                    out.records.append((f"{name}:{line_no}",
                                        rank_record(payload, path=name, line=line_no)))
                except BadInput as exc:
                    out.unreadable.append(str(exc))
                    out.unreadable_files.add(name)
        except (EpcapError, OSError) as exc:
            return None, f"{name}: unreadable ({exc})"
    return out, None


def world_problems(cell: Cell, got: Stated, obj: dict | None) -> tuple[list[str], list[str]]:
    """The world the ranks state against each other, the rank logs, the time object and
    cell.json's ntasks and nodes."""
    bad, unknown = [], []
    (at0, first), seen = got.records[0], {}
    for at, rec in got.records:
        if rec.world != first.world:
            bad.append(f"{at}: [EPCAP_RANK] field world {rec.world}, {at0} states {first.world}")
        if rec.rank >= rec.world:
            bad.append(f"{at}: [EPCAP_RANK] field rank {rec.rank} in a world of {rec.world}")
        if rec.rank in seen:
            bad.append(f"{at}: [EPCAP_RANK] field rank {rec.rank} stated again ({seen[rec.rank]})")
        seen.setdefault(rec.rank, at)
        m = RANK_LOG.fullmatch(at.rsplit("/", 1)[-1].rsplit(":", 1)[0])
        if m is not None and int(m.group(1)) != rec.rank:
            bad.append(f"{at}: [EPCAP_RANK] field rank {rec.rank} in rank{m.group(1)}.log")
    world = first.world
    extra = sorted(r for r in got.rank_logs if r >= world)
    if extra:
        bad.append(f"{got.rank_logs[extra[0]]}: a log of rank {extra[0]} in a world of {world} "
                   f"({at0} field world)")
    if exit_code(cell.cell_json) == 0 and got.rank_logs:
        missing = [r for r in range(world) if r not in got.rank_logs]
        if missing:
            bad.append(f"{cell.path}: a run that exited 0 holds no rank{missing[0]}.log of its "
                       f"world {world} ({at0} field world; {CELL_JSON} launcher.exit_code 0)")
        silent = [got.rank_logs[r] for r in range(world) if r in got.rank_logs
                  and r not in seen and got.rank_logs[r] not in got.unreadable_files]
        if silent:
            unknown.append(f"{silent[0]}: no [EPCAP_RANK] line in a run that exited 0 (its "
                           f"other ranks state one)")
    ranks = (obj or {}).get("ranks")
    if isinstance(ranks, int) and not isinstance(ranks, bool) and ranks != world:
        bad.append(f"{got.timing_at or cell.path}: [EPCAP_TIMING] field ranks {ranks}, the ranks "
                   f"state world {world} ({at0})")
    doc = cell.cell_json or {}
    ntasks, nodes = doc.get("ntasks"), doc.get("nodes")
    if isinstance(ntasks, int) and not isinstance(ntasks, bool) \
            and (ntasks < 1 or world % ntasks):
        bad.append(f"{cell.path}/{CELL_JSON}: field ntasks {ntasks} does not divide the ranks' "
                   f"world {world} ({at0})")
    hosts = sorted({rec.host for _, rec in got.records})
    if isinstance(nodes, int) and not isinstance(nodes, bool) and len(hosts) > nodes:
        bad.append(f"{cell.path}/{CELL_JSON}: field nodes {nodes}, the ranks state "
                   f"{len(hosts)} hosts {hosts}")
    return bad, unknown


def device_problems(got: Stated, obj: dict | None) -> list[str]:
    """A time object's device_name against rank 0's (the rank that prints it)."""
    named = (obj or {}).get("device_name")
    if not isinstance(named, str):
        return []
    zero = [(at, rec) for at, rec in got.records if rec.rank == 0]
    if not zero or zero[0][1].device_name == named:
        return []
    at, rec = zero[0]
    return [f"{got.timing_at}: [EPCAP_TIMING] field device_name {named!r}, rank 0 states "
            f"device_name {rec.device_name!r} ({at})"]


def local_launch(upload: Upload, cell: Cell) -> bool:
    """Whether the cell's ranks ran on the driver's host: the runbook as run's local
    launcher with no container engine recorded."""
    if not as_run(upload) or getattr(upload.runbook, "launcher", None) != "local":
        return False
    return (cell.provenance or {}).get("container.engine", "none") == "none"


def provenance_problems(upload: Upload, cell: Cell, got: Stated) -> list[str]:
    """Hosts, GPU kind and count of the cell's provenance against its ranks (docstring)."""
    prov = cell.provenance or {}
    src = cell.provenance_at or "provenance.txt"
    hosts = {h for h in re.split(r"[,\s]+", prov.get("hostnames", "")) if h}
    bad = []
    if hosts and local_launch(upload, cell):
        bad += [f"{at}: [EPCAP_RANK] field host {rec.host!r} is not {src}'s hostnames "
                f"{prov.get('hostnames')!r} (the local launcher: the ranks ran where the "
                f"driver did)" for at, rec in got.records if rec.host not in hosts][:1]
    here = [(at, rec) for at, rec in got.records if rec.host in hosts and rec.device_name != "cpu"]
    unseen = prov.get("gpu.source") == "none" and norm(prov.get("gpu.model")) in NO_GPU
    if not here or "gpu.model" not in prov or unseen:   # unseen: neither NVML nor nvidia-smi
        return bad
    kinds = [k for k in prov["gpu.model"].split(",") if norm(k) not in NO_GPU]
    for at, rec in here:
        if not any(same_gpu(rec.device_name, k) for k in kinds):
            bad.append(f"{at}: [EPCAP_RANK] field device_name {rec.device_name!r} on host "
                       f"{rec.host!r} is not among {src}'s gpu.model {prov['gpu.model']!r}")
            break
    count = prov.get("gpu.count", "")
    used = {(rec.host, rec.device) for _, rec in here}
    per_host = {h: sorted(d for hh, d in used if hh == h) for h, _ in used}
    for host, devices in sorted(per_host.items()):
        if count.isdigit() and len(devices) > int(count):
            bad.append(f"{cell.path}: ranks on host {host!r} state {len(devices)} GPU devices "
                       f"{devices} but {src}'s gpu.count is {count}")
    return bad


def backend_of(cell: Cell) -> str:
    """The cell's backend: cell.json's, else its name's second part."""
    named = (cell.cell_json or {}).get("cell")
    parts = cell.name.split("__")
    return norm(str(named.get("backend") or "")) if isinstance(named, dict) \
        else norm(parts[1] if len(parts) > 1 else "")


def check_hardware(table: Table, upload: Upload) -> Check:
    """Every cell's `[EPCAP_RANK]` lines against each other, its time object, cell.json and
    its provenance (module docstring)."""
    objs = {key: obj for key, _, obj in timing_objects(upload)} if as_run(upload) else {}
    stated, unknown = {}, []
    for key, cell in sorted(upload.cells.items()):
        if cell.problem:
            continue                                   # missing-provenance says so
        got, problem = read_stated(upload, cell)
        unknown += [problem] if problem else []
        if got is not None:
            stated[key] = got
            unknown += got.unreadable
    speaking = {backend_of(upload.cells[k]) for k, g in stated.items()
                if g.records or g.unreadable}
    if not speaking:
        return Check(HARDWARE_MISMATCH, NOT_APPLICABLE, [
            f"no rank log states {RANK_TAG} (written before the line existed, or by a backend "
            f"that does not print it): the ranks' hosts and devices are unstated"])
    bad, judged = [], 0
    for key, got in sorted(stated.items()):
        cell = upload.cells[key]
        if not got.records:
            if backend_of(cell) in speaking and exit_code(cell.cell_json) == 0 and got.rank_logs:
                unknown.append(f"{min(got.rank_logs.values())}: no {RANK_TAG} line in a run "
                               f"that exited 0 (its backend's other cells print one)")
            continue
        judged += 1
        b, u = world_problems(cell, got, objs.get(key))
        bad += b + device_problems(got, objs.get(key)) + provenance_problems(upload, cell, got)
        unknown += u
    return verdict_of(bad, [f"{judged} cells' ranks agree with their provenance, cell.json "
                            f"and time objects"], HARDWARE_MISMATCH, unknown)


__all__ = ["check_hardware"]

RULES: tuple[Rule, ...] = (
    Rule(HARDWARE_MISMATCH, "the hosts, devices and world a cell's ranks state ([EPCAP_RANK]) "
         "contradict its provenance (hostnames under the local launcher, gpu.model, "
         "gpu.count), cell.json (ntasks, nodes, a rank log per rank of an exit-0 run) or its "
         "time object (device_name, ranks)",
         (Source(ATTEMPTS_TSV, ()),), False, check_hardware,
         "provenance's GPU re-stated as a faster interconnect's (the link limit lifted), or "
         "the world size or hosts re-stated, with every table made to match"),
)
