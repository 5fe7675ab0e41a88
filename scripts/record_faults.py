"""Record real faults into cell directories with their injected truth (issue 41).

Runs REAL processes: the reference backend's worker (gloo, CPU) under epcap's own local
launcher (`harness.launch.local.LocalLauncher`), under `torchrun` (one task, `--tee 3`, so
every line carries torchrun's `[defaultN]:` prefix), and under the project's Slurm launcher
(`harness.launch.slurm.SlurmLauncher`: `srun --label` on the CI Slurm, `scripts/ci-slurm.sh`).
Each fault is injected from OUTSIDE the worker, never by a hook inside it: a signal sent to
the rank's pid (found by its environment), `prlimit --pid` on a running rank, a port held by
the recorder before the launch, a full tmpfs mounted for the run, a bad flag on the command
line, a broken module first on PYTHONPATH, Slurm's own time limit, memory limit and `scancel`.

Each case's folder under OUT (default tests/fixtures/classify/recorded/) holds the logs the
launcher captured (`rank<R>.log`, `launcher.log`, `slurm-<job>.out`), a `cell.json` in the
shape `epcap classify` reads (launcher state and exit code as the launcher returned them) and
`truth.json`: the injected class, the first failed rank ("any" when the fault hit every rank
alike), how it was injected and the documented reason for the class (docs/taxonomy.md).

    .venv/bin/python scripts/record_faults.py [--set recorded|recorded2] [--out DIR]
        [--only NAME ...] [--no-slurm]

`--set recorded2` records a second, disjoint case set (the same fault mechanisms in other
shapes: the signals under srun on 2 and 4 ranks, torchrun on 4 ranks, SIGSTOP under torchrun
and srun, prlimit under torchrun and srun, a port taken under torchrun, `scancel
--signal=USR1`, Slurm's limits on 4 ranks, ...) into tests/fixtures/classify/recorded2/.

Needs root for the tmpfs case (skipped otherwise) and a Slurm that answers for the srun cases
(skipped otherwise). `split.json` (dev / heldout by sha256 of the name) is rewritten for the
cases present; see the README written beside the cases.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.api.backend import LaunchSpec  # noqa: E402
from harness.io.atomic import write_text_atomic  # noqa: E402
from harness.launch import local as local_launch  # noqa: E402

# Upstream facts used here:
# - torchrun `--tee 3` (both streams, each line prefixed `[defaultN]:`): pytorch/pytorch
#   torch/distributed/run.py, read in the installed 2.13.0+cpu (git cf30153c4c131c81).
# - `prlimit --pid PID --as=BYTES` sets RLIMIT_AS of a running process: util-linux/util-linux
#   sys-utils/prlimit.c @ fd777151bf71eb8e2238a24e20efa8ce132e74e9 (installed: 2.38.1).
# - a tmpfs `-o size=` caps its bytes, writes past it fail ENOSPC: Linux
#   torvalds/linux Documentation/filesystems/tmpfs.rst @ 253e5df8b8f0145adb090f57c6f4e6efa52d738e.
OUT = ROOT / "tests" / "fixtures" / "classify" / "recorded"
OUT2 = ROOT / "tests" / "fixtures" / "classify" / "recorded2"
SIGNALS = ("SIGKILL", "SIGSEGV", "SIGTERM", "SIGABRT", "SIGBUS", "SIGSTOP", "prlimit")
PY = sys.executable
ROW = "[MOE_DROP_DEBUG][dispatch]"
# a small reference cell that runs long enough to be hit mid-run (the fault ends it)
LONG = ["--layers", "2", "--hidden", "64", "--experts", "8", "--topk", "2", "--expert-ffn", "64",
        "--seq", "256", "--personality", "echo", "--warmup", "1", "--iters", "400",
        "--trials", "1", "--device", "cpu"]
SHORT = [a if a != "400" else "3" for a in LONG]


def worker(ep: int, extra: list[str] | None = None, short: bool = False) -> list[str]:
    """The reference worker's argv for one rank of an `ep`-rank cell."""
    return [PY, "-m", "backends.reference", *(SHORT if short else LONG), "--ep", str(ep),
            *(extra or [])]


@dataclass
class Case:
    """One fault to record: how to launch, what to inject, and the truth."""

    name: str
    launcher: str                   # local | torchrun | srun
    ranks: int
    fault: str                      # the injection (see inject())
    cls: str                        # the true class (docs/taxonomy.md)
    first: str | None               # true first failed rank; "any": the fault hit all ranks
    why: str                        # why that class (the documented reading)
    victim: int = 0
    extra: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    slurm: dict = field(default_factory=dict)
    timeout_s: float | None = None  # the launcher's limit; None: 8 s for SIGSTOP, else 60 s


def _cases() -> list[Case]:
    crash = "a kernel fault signal recorded by the launcher is `crash` (docs/taxonomy.md)"
    kill = ("SIGKILL with nothing saying by whom (no OOM killer record): `unclassified`, "
            "quoted (docs/taxonomy.md, corpus33 bash_killed_137)")
    term = ("a SIGTERM from outside the job (no launcher kill, no rank error before it): a "
            "stop, `cancelled` (issue 41: outside signals are never a `crash`)")
    out = []
    for launcher in ("local", "torchrun"):
        for ranks, victim in ((2, 1), (4, 2), (2, 0), (4, 3)):
            if launcher == "torchrun" and ranks == 4:
                continue
            tag = f"{launcher}_n{ranks}_r{victim}"
            out += [Case(f"sigkill_{tag}", launcher, ranks, "SIGKILL", "unclassified",
                         str(victim), kill, victim),
                    Case(f"sigsegv_{tag}", launcher, ranks, "SIGSEGV", "crash", str(victim),
                         crash, victim),
                    Case(f"sigterm_{tag}", launcher, ranks, "SIGTERM", "cancelled",
                         str(victim), term, victim)]
        out += [Case(f"sigabrt_{launcher}_n2_r1", launcher, 2, "SIGABRT", "crash", "1", crash, 1),
                Case(f"sigbus_{launcher}_n2_r0", launcher, 2, "SIGBUS", "crash", "0", crash, 0)]
    hang = ("one rank stopped (SIGSTOP) past the gloo timeout: its peers report the collective "
            "timeout; no rank has a cause of its own: a communication hang (infra) whose "
            "first failed rank is the one that never reported")
    out += [Case("sigstop_local_n2_r1", "local", 2, "SIGSTOP", "infra", "1", hang, 1,
                 ["--pg-timeout-s", "4"]),
            Case("sigstop_local_n4_r0", "local", 4, "SIGSTOP", "infra", "0", hang, 0,
                 ["--pg-timeout-s", "4"])]
    host = ("host allocation failure (prlimit --as on the running rank): host memory is "
            "`does_not_fit` as docs/taxonomy.md reads it for the reference backend")
    out += [Case("prlimit_as_local_n2_r1", "local", 2, "prlimit", "does_not_fit", "1", host, 1),
            Case("prlimit_as_local_n4_r2", "local", 4, "prlimit", "does_not_fit", "2", host, 2)]
    port = ("the rendezvous port is taken by another process: rank 0 cannot listen (the "
            "environment, not the code): infra, rank 0")
    out += [Case("port_taken_local_n2", "local", 2, "port", "infra", "0", port),
            Case("port_taken_local_n4", "local", 4, "port", "infra", "0", port)]
    full = ("the tmpfs the routing trace is written to is full (ENOSPC, errno 28): storage "
            "errno is infra (signatures.yaml storage-errno); rank 0 writes it")
    out += [Case("enospc_tmpfs_local_n2", "local", 2, "enospc", "infra", "0", full)]
    flag = ("the worker's own argparse error (`prog: error:`, exit 2): `badflag`; every rank "
            "fails alike")
    out += [Case("badflag_capacity_local_n2", "local", 2, "badflag", "badflag", "any", flag,
                 extra=["--capacity", "-1"]),
            Case("badflag_unknown_torchrun_n2", "torchrun", 2, "badflag", "badflag", "any", flag,
                 extra=["--no-such-flag"])]
    broken = ("a broken module first on PYTHONPATH: the import raises before iteration 0 on "
              "every rank: an uncaught non-memory exception, `crash` (python-top-level-"
              "exceptions: every other type -> crash)")
    out += [Case("broken_module_local_n2", "local", 2, "broken", "crash", "any", broken),
            Case("broken_module_torchrun_n2", "torchrun", 2, "broken", "crash", "any", broken)]
    out += [Case("sigsegv_srun_n2_r1", "srun", 2, "SIGSEGV", "crash", "1", crash, 1),
            Case("scancel_term_srun_n2", "srun", 2, "scancel-TERM", "cancelled", None,
                 "scancel --signal=TERM from outside: `cancelled` (issue 41); no rank failed "
                 "of its own"),
            Case("scancel_srun_n2", "srun", 2, "scancel", "cancelled", None,
                 "a plain scancel: `cancelled`, no rank failed"),
            Case("time_limit_srun_n2", "srun", 2, "time-limit", "timeout", None,
                 "Slurm's time limit ended the job: `timeout` beats the teardown noise",
                 extra=["--hidden", "512", "--seq", "4096", "--iters", "100000"],
                 slurm={"time_limit": "1"}),
            Case("mem_limit_srun_n2", "srun", 2, "mem-limit", "badflag", None,
                 "slurmstepd's memory-limit kill is the runbook's limit: a configuration "
                 "failure naming slurm.mem_per_task (class badflag), never data",
                 slurm={"mem_per_task": "120M"})]
    return out


CASES = {c.name: c for c in _cases()}

# the truths' readings, shared by both sets (docs/taxonomy.md; the same `why` vocabulary)
CRASH = "a kernel fault signal recorded by the launcher is `crash` (docs/taxonomy.md)"
ABORT = CRASH
KILL = ("SIGKILL with nothing saying by whom (no OOM killer record): `unclassified`, quoted "
        "(docs/taxonomy.md, corpus33 bash_killed_137)")
TERM = ("a SIGTERM from outside the job (no launcher kill, no rank error before it): a stop, "
        "`cancelled` (issue 41: outside signals are never a `crash`)")
HANG = ("one rank stopped (SIGSTOP) past the gloo timeout: its peers report the collective "
        "timeout; no rank has a cause of its own: a communication hang (infra) whose first "
        "failed rank is the one that never reported")
HOST = ("host allocation failure (prlimit --as on the running rank): host memory is "
        "`does_not_fit` as docs/taxonomy.md reads it for the reference backend")
PORT = ("the rendezvous port is taken by another process: rank 0 cannot listen (the "
        "environment, not the code): infra, rank 0")
PORT_TR = ("the rendezvous port torchrun is given is taken by another process: its store "
           "cannot listen, no rank starts (the environment, not the code): infra; every rank "
           "fails alike")
FULL = ("the tmpfs the routing trace is written to is full (ENOSPC, errno 28): storage errno "
        "is infra (signatures.yaml storage-errno); rank 0 writes it")
FLAG = "the worker's own argparse error (`prog: error:`, exit 2): `badflag`; every rank fails alike"
BROKEN = ("a broken module first on PYTHONPATH: the import raises before iteration 0 on every "
          "rank: an uncaught non-memory exception, `crash` (python-top-level-exceptions: every "
          "other type -> crash)")
SCANCEL = ("scancel --signal={sig} from outside: `cancelled` (issue 41: an outside signal is "
           "never a `crash`); no rank failed of its own")
TLIMIT = "Slurm's time limit ended the job: `timeout` beats the teardown noise"
MLIMIT = ("slurmstepd's memory-limit kill is the runbook's limit: a configuration failure "
          "naming slurm.mem_per_task (class badflag), never data")
LONGER = ["--hidden", "512", "--seq", "4096", "--iters", "100000"]
STOP = ["--pg-timeout-s", "4"]


def _cases2() -> list[Case]:
    """The second set (`recorded2`): none of the first set's names, the same mechanisms in
    other shapes (launchers, rank counts, victims)."""
    truths = {"SIGKILL": ("unclassified", KILL), "SIGSEGV": ("crash", CRASH),
              "SIGABRT": ("crash", ABORT), "SIGBUS": ("crash", CRASH),
              "SIGTERM": ("cancelled", TERM)}
    out = []
    shapes = {
        "srun": [("SIGKILL", 2, 0), ("SIGKILL", 4, 2), ("SIGSEGV", 4, 3), ("SIGSEGV", 2, 0),
                 ("SIGABRT", 2, 0), ("SIGABRT", 4, 1), ("SIGBUS", 2, 1), ("SIGBUS", 4, 3),
                 ("SIGTERM", 2, 1), ("SIGTERM", 4, 0)],
        "torchrun": [("SIGKILL", 4, 2), ("SIGSEGV", 4, 3), ("SIGABRT", 4, 0), ("SIGBUS", 4, 1),
                     ("SIGTERM", 4, 1)],
        "local": [("SIGABRT", 4, 2), ("SIGBUS", 4, 3), ("SIGTERM", 4, 1), ("SIGKILL", 4, 1)],
    }
    for launcher, rows in shapes.items():
        for fault, ranks, victim in rows:
            cls, why = truths[fault]
            out.append(Case(f"{fault.lower()}_{launcher}_n{ranks}_r{victim}", launcher, ranks,
                            fault, cls, str(victim), why, victim))
    out += [Case("sigstop_torchrun_n2_r1", "torchrun", 2, "SIGSTOP", "infra", "1", HANG, 1,
                 STOP, timeout_s=45.0),
            Case("sigstop_torchrun_n4_r2", "torchrun", 4, "SIGSTOP", "infra", "2", HANG, 2,
                 STOP, timeout_s=45.0),
            Case("sigstop_srun_n2_r0", "srun", 2, "SIGSTOP", "infra", "0", HANG, 0, STOP,
                 timeout_s=120.0),
            Case("sigstop_srun_n4_r3", "srun", 4, "SIGSTOP", "infra", "3", HANG, 3, STOP,
                 timeout_s=120.0),
            Case("sigstop_local_n4_r2", "local", 4, "SIGSTOP", "infra", "2", HANG, 2, STOP)]
    out += [Case("prlimit_as_local_n4_r3", "local", 4, "prlimit", "does_not_fit", "3", HOST, 3),
            Case("prlimit_as_torchrun_n2_r0", "torchrun", 2, "prlimit", "does_not_fit", "0",
                 HOST, 0),
            Case("prlimit_as_torchrun_n4_r1", "torchrun", 4, "prlimit", "does_not_fit", "1",
                 HOST, 1),
            Case("prlimit_as_srun_n2_r1", "srun", 2, "prlimit", "does_not_fit", "1", HOST, 1),
            Case("prlimit_as_srun_n4_r3", "srun", 4, "prlimit", "does_not_fit", "3", HOST, 3)]
    out += [Case("port_taken_torchrun_n2", "torchrun", 2, "port", "infra", "any", PORT_TR),
            Case("port_taken_torchrun_n4", "torchrun", 4, "port", "infra", "any", PORT_TR),
            Case("enospc_tmpfs_local_n4", "local", 4, "enospc", "infra", "0", FULL)]
    out += [Case("badflag_capacity_srun_n2", "srun", 2, "badflag", "badflag", "any", FLAG,
                 extra=["--capacity", "-1"]),
            Case("badflag_unknown_srun_n4", "srun", 4, "badflag", "badflag", "any", FLAG,
                 extra=["--no-such-flag"]),
            Case("badflag_capacity_torchrun_n4", "torchrun", 4, "badflag", "badflag", "any",
                 FLAG, extra=["--capacity", "-1"]),
            Case("broken_module_srun_n2", "srun", 2, "broken", "crash", "any", BROKEN),
            Case("broken_module_local_n4", "local", 4, "broken", "crash", "any", BROKEN)]
    out += [Case("scancel_usr1_srun_n2", "srun", 2, "scancel-USR1", "cancelled", None,
                 SCANCEL.format(sig="USR1")),
            Case("scancel_usr1_srun_n4", "srun", 4, "scancel-USR1", "cancelled", None,
                 SCANCEL.format(sig="USR1")),
            Case("scancel_term_srun_n4", "srun", 4, "scancel-TERM", "cancelled", None,
                 SCANCEL.format(sig="TERM")),
            Case("time_limit_srun_n4", "srun", 4, "time-limit", "timeout", None, TLIMIT,
                 extra=LONGER, slurm={"time_limit": "1"}),
            Case("mem_limit_srun_n4", "srun", 4, "mem-limit", "badflag", None, MLIMIT,
                 slurm={"mem_per_task": "120M"})]
    return out


CASES2 = {c.name: c for c in _cases2()}
SETS = {"recorded": (CASES, OUT), "recorded2": (CASES2, OUT2)}
assert not set(CASES) & set(CASES2), "the second set repeats a case of the first"


def half(name: str) -> str:
    """dev when the first byte of sha256(name) is even, else heldout (fixed, stated)."""
    return "dev" if hashlib.sha256(name.encode()).digest()[0] % 2 == 0 else "heldout"


# ---------------------------------------------------------------- finding and hitting ranks
def rank_pids(marker_key: str, marker: str, rank: int) -> list[int]:
    """pids of the worker processes of rank `rank` (environment `marker_key`=`marker`)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = dict(kv.split(b"=", 1) for kv in (entry / "environ").read_bytes().split(b"\0")
                       if b"=" in kv)
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if env.get(marker_key.encode()) != marker.encode() or b"backends.reference" not in cmd:
            continue
        # the rank is a python process; `srun ... python -m backends.reference` carries the
        # job's SLURM_JOB_ID and SLURM_PROCID=0 too (the batch step's) and is not rank 0
        if not Path(cmd[0].decode(errors="replace")).name.startswith("python"):
            continue
        if env.get(b"RANK", env.get(b"SLURM_PROCID")) == str(rank).encode() and \
                b"torchrun" not in b" ".join(cmd):
            out.append(int(entry.name))
    return out


def wait_rows(path: Path, limit_s: float = 60.0) -> None:
    """Wait until `path` shows a dispatch row (the rank is mid-run)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.is_file() and ROW in path.read_text(errors="replace"):
            return
        time.sleep(0.02)
    raise RuntimeError(f"no dispatch row in {path} after {limit_s:g} s")


def hit(case: Case, pids: list[int]) -> str:
    """Inject the case's fault into the victim's pids; returns how, in words."""
    if case.fault == "prlimit":
        for pid in pids:
            subprocess.run(["prlimit", f"--pid={pid}", "--as=200000000"], check=True)
        return f"prlimit --pid <rank {case.victim}> --as=200000000 (200 MB) mid-run"
    sig = getattr(signal, case.fault)
    for pid in pids:
        os.kill(pid, sig)
    return f"{case.fault} sent by pid to rank {case.victim} mid-run"


# ---------------------------------------------------------------- the three launchers
def run_local(case: Case, cell: Path, argv: list[str], env: dict[str, str],
              timeout_s: float, port_holder: socket.socket | None) -> tuple[str, int | None, str]:
    """The rank(s) under harness/launch/local.py; returns (state, exit code, how)."""
    launcher = local_launch.LocalLauncher()
    if case.launcher == "torchrun":
        port = port_holder.getsockname()[1] if port_holder is not None else \
            local_launch.free_port()
        argv = [str(Path(PY).parent / "torchrun"), "--nnodes", "1", "--nproc-per-node",
                str(case.ranks), "--master-addr", "127.0.0.1", "--master-port", str(port),
                "--tee", "3", "-m", "backends.reference", *argv[3:]]
        spec = LaunchSpec(argv=argv, env=env, ntasks=1, cwd=str(ROOT))
    else:
        spec = LaunchSpec(argv=argv, env=env, ntasks=case.ranks, cwd=str(ROOT))
    saved = local_launch.free_port
    if port_holder is not None and case.launcher == "local":   # the recorder holds it
        local_launch.free_port = lambda: port_holder.getsockname()[1]
    try:
        handle = launcher.submit(case.name, spec, cell, timeout_s)
    finally:
        local_launch.free_port = saved
    how = case.fault
    if case.fault in SIGNALS:
        log = cell / (f"rank{case.victim}.log" if case.launcher == "local" else "rank0.log")
        wait_rows(log, 60 if case.launcher == "local" else 180)
        pids = rank_pids(local_launch.MARKER_ENV, str(cell.resolve()), case.victim)
        if not pids:
            raise RuntimeError(f"{case.name}: rank {case.victim} not found")
        how = hit(case, pids)
    deadline = time.monotonic() + timeout_s + 60
    while (res := launcher.poll(handle)) is None:
        if time.monotonic() > deadline:
            launcher.cancel(handle)
            raise RuntimeError(f"{case.name}: never ended")
        time.sleep(0.05)
    return res.state, res.exit_code, how


class _Rb:
    """The parts of a runbook the Slurm launcher reads."""

    def __init__(self, **slurm):
        from harness.runbook.model import SlurmConfig
        self.campaign, self.slurm, self.path = "record-faults", SlurmConfig(**slurm), None


def run_srun(case: Case, cell: Path, argv: list[str], env: dict[str, str],
             timeout_s: float) -> tuple[str, int | None, str]:
    """The ranks under harness/launch/slurm.py (sbatch + srun --label); returns as run_local."""
    from harness.launch import slurm as S
    launcher = S.SlurmLauncher(_Rb(**case.slurm))
    if case.fault == "mem-limit":       # a rank that allocates past the limit, then iterates
        argv = [PY, "-c", "import time,torch\nx=torch.ones(60_000_000)\nprint('allocated',"
                " flush=True)\ny=torch.ones(60_000_000)\ntime.sleep(30)"]
    handle = launcher.submit(case.name, LaunchSpec(argv=argv, env=env, ntasks=case.ranks,
                                                   cwd=str(ROOT)), cell, timeout_s)
    how = case.fault
    if case.fault in (*SIGNALS, "scancel-TERM", "scancel-USR1", "scancel"):
        wait_rows(cell / f"rank{case.victim}.log", 180)
        if case.fault in SIGNALS:
            pids = rank_pids("SLURM_JOB_ID", handle.job_id, case.victim)
            if not pids:
                raise RuntimeError(f"{case.name}: rank {case.victim} not found")
            how = hit(case, pids)
        else:
            sig = [f"--signal={case.fault[8:]}"] if case.fault.startswith("scancel-") else []
            subprocess.run(["scancel", *sig, handle.job_id], check=True)
            how = f"scancel {' '.join(sig)} <job> mid-run".replace("  ", " ")
    elif case.fault == "time-limit":
        how = "Slurm time limit of 1 minute on a run that needs longer"
    elif case.fault == "mem-limit":
        how = "slurm.mem_per_task=120M, a rank allocating 480 MB"
        if case.ranks != 2:
            how = f"slurm.mem_per_task=120M, each of {case.ranks} ranks allocating 480 MB"
    deadline = time.monotonic() + 300
    while (res := launcher.poll(handle)) is None:
        if time.monotonic() > deadline:
            launcher.cancel(handle)
            raise RuntimeError(f"{case.name}: never ended")
        time.sleep(0.5)
    return res.state, res.exit_code, how


def broken_module(tmp: Path) -> Path:
    """A folder whose `torch` package is broken (first on PYTHONPATH)."""
    pkg = tmp / "broken" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise AttributeError(\"module 'torch' has no attribute "
                                     "'_C' (a broken install first on PYTHONPATH)\")\n")
    return pkg.parent


def record(case: Case, out: Path) -> dict:
    """Run one case into out/<name>/ and write cell.json and truth.json there."""
    cell = out / case.name
    if cell.exists():
        shutil.rmtree(cell)
    cell.mkdir(parents=True)
    env = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **case.env}
    argv = worker(case.ranks, case.extra, short=case.fault in ("enospc",))
    holder = None
    with tempfile.TemporaryDirectory(prefix="epcap-fault-") as tmp:
        mount = None
        if case.fault == "broken":
            env["PYTHONPATH"] = os.pathsep.join([str(broken_module(Path(tmp))), str(ROOT)])
        if case.fault == "port":
            holder = socket.socket()
            holder.bind(("127.0.0.1", 0))
            holder.listen(1)
        if case.fault == "enospc":
            mount = Path(tmp) / "full"
            mount.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)],
                           check=True)
            with open(mount / "filler", "wb") as fh:       # fill it
                try:
                    fh.write(b"\0" * 65536)
                except OSError:
                    pass
            argv += ["--record-trace", str(mount / "routing.jsonl")]
        try:
            timeout = case.timeout_s or (8.0 if case.fault == "SIGSTOP" else 60.0)
            if case.launcher == "srun":
                state, code, how = run_srun(case, cell, argv, env, timeout)
            else:
                state, code, how = run_local(case, cell, argv, env, timeout, holder)
        finally:
            if holder is not None:
                holder.close()
            if mount is not None:
                subprocess.run(["umount", str(mount)], check=False)
    layout = {"local": ("rank", case.ranks, 0), "torchrun": ("node", 1, case.ranks),
              "srun": ("rank", case.ranks, 0)}[case.launcher]
    doc = {"cell": {"backend": "echo", "purpose": "measure", "capacity": "2.00"},
           "name": case.name, "launcher": {"state": state, "exit_code": code,
                                           "log_layout": layout[0]},
           "ntasks": layout[1], "nodes": 1, "gpus_per_node": layout[2]}
    write_text_atomic(cell / "cell.json", json.dumps(doc, indent=1) + "\n")
    truth = {"class": case.cls, "first_failed_rank": case.first, "launcher": case.launcher,
             "ranks": case.ranks, "fault": case.fault, "injected": how, "why": case.why,
             "half": half(case.name)}
    write_text_atomic(cell / "truth.json", json.dumps(truth, indent=1) + "\n")
    for stray in cell.glob("*.sbatch"):     # the batch script is the launcher's, not a log
        stray.unlink()
    return truth


def slurm_ok() -> bool:
    """Whether a Slurm answers here (sinfo)."""
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def main(argv: list[str] | None = None) -> int:
    """Record the chosen cases (all by default) and rewrite split.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", dest="which", choices=sorted(SETS), default="recorded",
                    help="the case set (default: the first, `recorded`)")
    ap.add_argument("--out", type=Path, default=None, help="default: the set's fixture folder")
    ap.add_argument("--only", nargs="*", default=None, choices=sorted({*CASES, *CASES2}))
    ap.add_argument("--no-slurm", action="store_true")
    a = ap.parse_args(argv)
    cases, default_out = SETS[a.which]
    a.out = a.out or default_out
    if a.only and set(a.only) - set(cases):
        ap.error(f"not in set {a.which}: {sorted(set(a.only) - set(cases))}")
    a.out.mkdir(parents=True, exist_ok=True)
    use_slurm = not a.no_slurm and slurm_ok()
    for name in a.only or sorted(cases):
        case = cases[name]
        if case.launcher == "srun" and not use_slurm:
            print(f"skip {name}: no Slurm answers", flush=True)
            continue
        if case.fault == "enospc" and os.geteuid() != 0:
            print(f"skip {name}: mounting a tmpfs needs root", flush=True)
            continue
        started = time.monotonic()
        try:
            truth = record(case, a.out)
        except (RuntimeError, subprocess.CalledProcessError) as exc:   # not recorded: said
            print(f"FAILED {name}: {exc}", flush=True)
            shutil.rmtree(a.out / name, ignore_errors=True)
            continue
        print(f"{name}: {truth['class']} rank {truth['first_failed_rank']} "
              f"({time.monotonic() - started:.1f} s)", flush=True)
    split = {p.name: half(p.name) for p in sorted(a.out.iterdir()) if (p / "truth.json").is_file()}
    write_text_atomic(a.out / "split.json", json.dumps(split, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
