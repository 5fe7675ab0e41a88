"""Health probe: NVIDIA driver present, every GPU idle, zero uncorrected ECC errors (via NVML).

Used by `epcap doctor`, by preflight (`probe()`), and on each cell's node before its ranks
start (`python -m harness.health --pre-cell`, written into Slurm batch scripts). The checks
are a pure function over readings (`evaluate`), so every failure path is testable without a
GPU; `read_nvml` talks to the driver through NVML (`nvidia-ml-py`, the `[cluster]` extra) and,
where the bindings are missing, `read_smi` asks `nvidia-smi` for the same readings (as
provenance does), so a node without the extra still sees its GPUs. On a machine without
GPUs, NVML, nvidia-smi or driver the status is `no-gpu` and ok=True (reference backends run on
CPUs), unless the caller requires GPUs (`--require-gpus N`).

nvidia-smi query fields (`nvidia-smi --help-query-gpu`, `--help-query-compute-apps`; NVIDIA
driver documentation): index, name, uuid, memory.used (MiB with nounits),
ecc.errors.uncorrected.volatile.total, ecc.errors.uncorrected.aggregate.total,
driver_version; compute apps: gpu_uuid, pid. `[N/A]` / `[Not Supported]` mean no value.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import sys
from dataclasses import asdict, dataclass, field, replace

from harness.io.boundary.tools import run_tool

DEFAULT_MAX_USED_MIB = 1024
PRE_CELL_FAIL_EXIT = 97         # batch scripts map this exit to "health probe failed"
HEALTH_TAG = "[EPCAP_HEALTH]"
SMI_TIMEOUT_S = 30.0
SMI_GPU_FIELDS = ("index", "name", "uuid", "memory.used", "ecc.errors.uncorrected.volatile.total",
                  "ecc.errors.uncorrected.aggregate.total", "driver_version")
SMI_APP_FIELDS = ("gpu_uuid", "pid")
# Transformer Engine's op fuser for grouped MoE experts (`--use-transformer-engine-op-fuser`):
# NVIDIA/Megatron-LM d98e8a64 megatron/core/transformer/moe/experts.py:382-393 uses it only
# with transformer-engine >= 2.14.0 and silently falls back to the unfused path otherwise.
TE_OP_FUSER_MIN = (2, 14, 0)
TE_DISTRIBUTIONS = ("transformer-engine", "transformer_engine", "transformer-engine-torch")
PRE_RELEASE = ("dev", "rc", "a", "b", "c", "pre")


@dataclass(frozen=True)
class GpuReading:
    """What NVML said about one GPU. ECC counts are None where the GPU does not support them."""

    index: int
    name: str = ""
    uuid: str = ""
    memory_used_mib: float = 0.0
    compute_pids: tuple[int, ...] = ()
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    error: str = ""                 # a reading that failed (NVML error text)


@dataclass
class HealthReport:
    """Verdict of one probe. status: ok | no-gpu | unhealthy. failures name GPU and check."""

    ok: bool
    status: str
    gpus: list[dict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    driver: str | None = None
    reason: str = ""                # why no-gpu (no NVML, no driver, no device)
    source: str = "none"            # nvml | nvidia-smi | none: who read the GPUs

    def to_dict(self) -> dict:
        return asdict(self)


class NoGpu(Exception):
    """NVML, its driver or any device is missing: the machine is CPU-only for our purposes."""


class GpuToolFailed(NoGpu):
    """nvidia-smi is installed but failed (driver not loaded, no answer, unreadable output):
    not a CPU-only machine, a broken one -- the probe is unhealthy, never ok."""


def gpu_failures(gpu: GpuReading, max_used_mib: float) -> list[str]:
    """The failed checks of one GPU, each as 'gpu<i> (<uuid>): <check>: <detail>'."""
    who = f"gpu{gpu.index}" + (f" ({gpu.uuid})" if gpu.uuid else "")
    if gpu.error:
        return [f"{who}: readable: {gpu.error}"]
    out = []
    if gpu.compute_pids:
        pids = ",".join(str(p) for p in gpu.compute_pids)
        out.append(f"{who}: idle: {len(gpu.compute_pids)} compute process(es) running "
                   f"(pids {pids})")
    if gpu.memory_used_mib >= max_used_mib:
        out.append(f"{who}: idle: {gpu.memory_used_mib:.0f} MiB memory used "
                   f"(threshold {max_used_mib:.0f} MiB)")
    for kind, count in (("volatile", gpu.ecc_volatile_uncorrected),
                        ("aggregate", gpu.ecc_aggregate_uncorrected)):
        if count:
            out.append(f"{who}: ecc: {count} uncorrected {kind} ECC error(s)")
    return out


def evaluate(driver: str | None, gpus: list[GpuReading],
             max_used_mib: float = DEFAULT_MAX_USED_MIB, require_gpus: int = 0) -> HealthReport:
    """Pure verdict over readings: every GPU idle and ECC-clean; enough GPUs if required."""
    rows = [asdict(g) for g in gpus]
    if not gpus:
        if require_gpus > 0:
            return HealthReport(False, "unhealthy", rows,
                                [f"driver: {require_gpus} GPU(s) required, none visible"],
                                driver, "no GPU visible")
        return HealthReport(True, "no-gpu", rows, [], driver, "no GPU visible")
    failures = [f for g in gpus for f in gpu_failures(g, max_used_mib)]
    if len(gpus) < require_gpus:
        failures.append(f"driver: {require_gpus} GPU(s) required, {len(gpus)} visible")
    return HealthReport(not failures, "ok" if not failures else "unhealthy", rows, failures,
                        driver)


def _ecc(nvml, handle, counter) -> int | None:
    """Uncorrected ECC count of one counter type, None where unsupported."""
    try:
        return int(nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter))
    except nvml.NVMLError:
        return None


def _as_text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_gpu(nvml, index: int) -> GpuReading:
    """One GPU's readings; an NVML error becomes a failed (unreadable) reading."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        return GpuReading(
            index=index, name=_as_text(nvml.nvmlDeviceGetName(handle)),
            uuid=_as_text(nvml.nvmlDeviceGetUUID(handle)),
            memory_used_mib=nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20,
            compute_pids=tuple(int(p.pid) for p in procs),
            ecc_volatile_uncorrected=_ecc(nvml, handle, nvml.NVML_VOLATILE_ECC),
            ecc_aggregate_uncorrected=_ecc(nvml, handle, nvml.NVML_AGGREGATE_ECC))
    except nvml.NVMLError as exc:
        return GpuReading(index=index, error=str(exc))


def read_nvml(indices: list[int] | None = None) -> tuple[str, list[GpuReading]]:
    """(driver version, readings) from NVML; raises NoGpu without NVML, driver or devices."""
    try:
        import pynvml as nvml  # lazy/optional: rich is slow; pynvml absent on CPU machines
    except ImportError as exc:
        raise NoGpu("NVML Python bindings (nvidia-ml-py) not installed") from exc
    try:
        nvml.nvmlInit()
    except Exception as exc:            # NVMLError subclasses: library/driver not found
        raise NoGpu(f"NVML did not initialise: {exc}") from exc
    try:
        driver = _as_text(nvml.nvmlSystemGetDriverVersion())
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            raise NoGpu("driver loaded but no GPU visible")
        wanted = range(count) if indices is None else [i for i in indices if i < count]
        return driver, [_read_gpu(nvml, i) for i in wanted]
    finally:
        nvml.nvmlShutdown()


def _smi(args: list[str]) -> list[list[str]]:
    """Rows of one `nvidia-smi --query-... --format=csv,noheader,nounits` call; NoGpu on failure."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise NoGpu("nvidia-smi not on PATH")
    done = run_tool([smi, *args, "--format=csv,noheader,nounits"], timeout_s=SMI_TIMEOUT_S)
    if done.missing:
        raise NoGpu(done.problem or "nvidia-smi could not start")
    if not done.ok:                 # driver not loaded, no answer, non-UTF-8 output
        raise GpuToolFailed(done.problem or "nvidia-smi failed")
    return [[c.strip() for c in line.split(",")] for line in done.out.splitlines()
            if line.strip()]


def _smi_int(text: str) -> int | None:
    """An nvidia-smi count; None for `[N/A]`, `[Not Supported]` and other non-numbers."""
    try:
        return int(text)
    except ValueError:
        pass
    try:                            # "4096.0": an integral float
        value = float(text)
        return int(value) if value.is_integer() else None
    except (ValueError, OverflowError):
        return None


def _readable(row: list[str], fields: tuple[str, ...], counts: tuple[int, ...]) -> bool:
    """True when `row` has one cell per field and each cell at `counts` is a number or a
    bracketed note (`[N/A]`, `[Not Supported]`): what nvidia-smi writes there."""
    if len(row) != len(fields):
        return False
    return all(_smi_int(row[i]) is not None or
               (row[i].startswith("[") and row[i].endswith("]")) for i in counts)


def _unreadable(row: list[str]) -> GpuToolFailed:
    """An installed nvidia-smi whose answer cannot be read: a broken tool, never a CPU-only
    machine, so the probe is unhealthy (the row shown escaped and cut)."""
    return GpuToolFailed(f"nvidia-smi answered an unreadable row: {ascii(','.join(row))[:200]}")


def read_smi(indices: list[int] | None = None) -> tuple[str, list[GpuReading]]:
    """(driver version, readings) from `nvidia-smi`; raises NoGpu without it or any GPU, and
    GpuToolFailed for a row it cannot read (the wrong number of columns, a non-number)."""
    rows = _smi([f"--query-gpu={','.join(SMI_GPU_FIELDS)}"])
    if not rows:
        raise NoGpu("nvidia-smi lists no GPU")
    pids: dict[str, list[int]] = {}
    for row in _smi([f"--query-compute-apps={','.join(SMI_APP_FIELDS)}"]):
        if not _readable(row, SMI_APP_FIELDS, (1,)):
            raise _unreadable(row)
        pid = _smi_int(row[1])
        if pid is not None:
            pids.setdefault(row[0], []).append(pid)
    gpus, driver = [], ""
    for row in rows:
        index = _smi_int(row[0]) if _readable(row, SMI_GPU_FIELDS, (0, 4, 5)) else None
        if index is None:
            raise _unreadable(row)
        _, name, uuid, used, vol, agg, driver = row
        if indices is not None and index not in indices:
            continue
        used_mib = _smi_int(used)
        gpus.append(GpuReading(
            index=index, name=name, uuid=uuid, memory_used_mib=float(used_mib or 0),
            compute_pids=tuple(pids.get(uuid, ())), ecc_volatile_uncorrected=_smi_int(vol),
            ecc_aggregate_uncorrected=_smi_int(agg),
            error="" if used_mib is not None else f"memory.used unreadable ({used})"))
    return driver, gpus


def probe_tools() -> list[str]:
    """The GPU readers this Python can use: `nvml` (nvidia-ml-py importable), `nvidia-smi`."""
    tools = []
    try:
        import pynvml  # noqa: F401  # lazy/optional: only the [cluster] extra installs it
        tools.append("nvml")
    except ImportError:
        pass
    if shutil.which("nvidia-smi"):
        tools.append("nvidia-smi")
    return tools


def read_gpus(indices: list[int] | None = None) -> tuple[str, list[GpuReading], str]:
    """(driver, readings, source) from NVML, else nvidia-smi; NoGpu naming both reasons."""
    try:
        driver, gpus = read_nvml(indices)
        return driver, gpus, "nvml"
    except NoGpu as nvml_why:
        try:
            driver, gpus = read_smi(indices)
        except GpuToolFailed as smi_why:
            raise GpuToolFailed(f"{nvml_why}; {smi_why}") from None
        except NoGpu as smi_why:
            raise NoGpu(f"{nvml_why}; {smi_why}") from None
        return driver, gpus, "nvidia-smi"


def probe(max_used_mib: int = DEFAULT_MAX_USED_MIB, require_gpus: int = 0,
          indices: list[int] | None = None) -> HealthReport:
    """Read the GPUs (all, or `indices`) and judge them; `no-gpu` on a CPU-only machine."""
    try:
        driver, gpus, source = read_gpus(indices)
    except GpuToolFailed as exc:    # installed and failing: never `ok`
        return HealthReport(False, "unhealthy", [], [f"driver: {exc}"], None, str(exc),
                            "nvidia-smi")
    except NoGpu as exc:
        report = evaluate(None, [], max_used_mib, require_gpus)
        report.reason = str(exc)
        return report
    report = evaluate(driver, gpus, max_used_mib, require_gpus)
    report.source = source
    return report


def job_gpu_indices(environ: dict[str, str]) -> list[int] | None:
    """GPU indices Slurm allocated to this job (SLURM_JOB_GPUS), None when not set or unparsable."""
    text = environ.get("SLURM_JOB_GPUS") or environ.get("SLURM_STEP_GPUS") or ""
    try:
        return [int(x) for x in text.split(",")] if text.strip() else None
    except ValueError:
        return None


def _table(report: HealthReport) -> None:
    """Print the report as a small rich table (one row per GPU) plus failures."""
    from rich.console import Console  # lazy/optional: rich is slow; pynvml absent on CPU machines
    from rich.table import Table  # lazy/optional: rich is slow; pynvml absent on CPU machines
    console = Console()
    console.print(f"health: [bold]{report.status}[/bold]"
                  + (f"  driver {report.driver}" if report.driver else "")
                  + (f"  ({report.reason})" if report.reason else ""))
    if report.gpus:
        table = Table("gpu", "name", "mem used MiB", "compute procs", "ECC vol", "ECC agg")
        for g in report.gpus:
            table.add_row(str(g["index"]), g["name"] or g["error"],
                          f"{g['memory_used_mib']:.0f}", str(len(g["compute_pids"])),
                          _na(g["ecc_volatile_uncorrected"]), _na(g["ecc_aggregate_uncorrected"]))
        console.print(table)
    for failure in report.failures:
        console.print(f"[red]FAIL[/red] {failure}", highlight=False)


def _na(value) -> str:
    return "n/a" if value is None else str(value)


def te_version(read=importlib.metadata.version) -> str | None:
    """The installed Transformer Engine version (package metadata; TE is not imported)."""
    for name in TE_DISTRIBUTIONS:
        try:
            return str(read(name))
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def at_least(version: str, minimum: tuple[int, ...]) -> bool:
    """PEP 440 order for the cases TE ships: '2.14.0' and '2.14.0+abc' reach (2, 14, 0);
    '2.14.0.dev0' and '2.14.0rc1' do not (as Megatron's is_te_min_version sees them)."""
    match = re.match(r"(\d+(?:\.\d+)*)(.*)", version.split("+")[0].strip())
    if match is None:
        return False
    release = [int(x) for x in match.group(1).split(".")]
    rest = match.group(2)
    width = max(len(release), len(minimum))
    got = tuple(release) + (0,) * (width - len(release))
    need = tuple(minimum) + (0,) * (width - len(minimum))
    if got != need:
        return got > need
    return not rest.lstrip(".").lower().startswith(PRE_RELEASE)


def te_op_fuser_line(version: str | None) -> str:
    """The doctor's line on the TE op fuser: whether Megatron would really fuse the grouped
    experts with this Transformer Engine, or fall back silently (TE_OP_FUSER_MIN)."""
    need = ".".join(map(str, TE_OP_FUSER_MIN))
    if version is None:
        return (f"te-op-fuser: transformer-engine not installed here; "
                f"--use-transformer-engine-op-fuser needs >= {need} on the nodes")
    if at_least(version, TE_OP_FUSER_MIN):
        return f"te-op-fuser: transformer-engine {version} >= {need}: grouped experts fuse"
    return (f"te-op-fuser: WARN transformer-engine {version} < {need}: "
            f"--use-transformer-engine-op-fuser falls back to unfused experts")


def cli_doctor(as_json: bool = False, max_used_mib: int = DEFAULT_MAX_USED_MIB,
               require_gpus: int = 0, problems: tuple[str, ...] = ()) -> int:
    """`epcap doctor`: probe and print (table or one JSON document) with the TE op-fuser
    line; exit 1 when unhealthy: a GPU check failed, fewer than `require_gpus` GPUs are
    visible (a runbook's gpus_per_node), or one of `problems` (a missing container plugin)."""
    report = probe(max_used_mib, require_gpus)
    if problems:
        report = replace(report, ok=False, status="unhealthy",
                                     failures=[*report.failures, *problems])
    fuser = te_op_fuser_line(te_version())
    if as_json:
        print(json.dumps({**report.to_dict(), "te_op_fuser": fuser}, sort_keys=True))
    else:
        _table(report)
        print(fuser)
    return 0 if report.ok else 1


def pre_cell(require_gpus: int, max_used_mib: int, environ: dict[str, str]) -> int:
    """Node-side check before a cell's ranks start: prints one verdict line per failure."""
    report = probe(max_used_mib, require_gpus, job_gpu_indices(environ))
    host = os.uname().nodename
    if report.ok:
        print(f"{HEALTH_TAG} {host}: {report.status} ({len(report.gpus)} GPU(s))", flush=True)
        return 0
    for failure in report.failures:
        print(f"{HEALTH_TAG} FAIL {host}: {failure}", file=sys.stderr, flush=True)
    return PRE_CELL_FAIL_EXIT


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.health [--pre-cell] [--require-gpus N] [--max-used-mib M] [--json]`."""
    parser = argparse.ArgumentParser(prog="python -m harness.health")
    parser.add_argument("--pre-cell", action="store_true",
                        help="node-side check before a cell; exit 97 naming failed GPU checks")
    parser.add_argument("--require-gpus", type=int, default=0)
    parser.add_argument("--max-used-mib", type=int, default=DEFAULT_MAX_USED_MIB)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.pre_cell:
        return pre_cell(args.require_gpus, args.max_used_mib, dict(os.environ))
    return cli_doctor(args.json, args.max_used_mib)


if __name__ == "__main__":
    sys.exit(main())
