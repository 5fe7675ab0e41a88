"""Local launcher: `ntasks` subprocesses per cell, each in its own session (process group).

Every rank gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT on
top of os.environ + spec.env; its stdout+stderr reach cell_dir/rank<R>.log through its own
capture process (harness/launch/capture.py: the one redaction pass, line by line, before
anything is written; a pipe, or a FIFO for a forked rank). A task that starts its own ranks
(spec.ranks_per_task > 1: a worker given --ranks) gets one FIFO per rank (RANK_FIFOS_ENV), all
read by one capture (a thread each: one interpreter's start, not one per rank), so rank<R>.log
still holds rank R's lines only; the task's own lines go to node<T>.log. A capture
whose FIFO no rank opens gives up after the run's timeout, and one still waiting when the
cell ends is released, so no capture outlives its cell. A cell whose
logs stop growing for `timeout_s` is killed (every rank's process group) and ends `timeout`.
Each task that ends non-zero is recorded, in the order the launcher saw it end, in
cell_dir/launcher.log (EXIT_RECORD: its exit code, negative for a signal, and pid): the
taxonomy's exit record (signatures.yaml `local-launcher-exit`), so a rank killed by a signal,
which prints nothing, is still named as the first failed rank. When one rank fails, the others get a short grace period and are then killed, so a collective
waiting on a dead peer never hangs the campaign. A run whose env asks for it (EPCAP_PREFORK)
is forked from a server that pre-imported those modules (harness.launch.forkserver).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.api.backend import RANK_FIFOS_ENV, LaunchSpec, free_port
from harness.api.launcher import JobHandle, JobResult, Launcher
from harness.launch.capture import release_fifo
from harness.launch.forkserver import START_DEADLINE_S, ForkServer, uses_forkserver
from harness.vocab import LauncherState

HARNESS_ROOT = Path(__file__).resolve().parents[2]

PEER_GRACE_S = 3.0          # after one rank fails, how long the others may take to exit
KILL_WAIT_S = 2.0           # SIGTERM -> SIGKILL escalation
CAPTURE_WAIT_S = 10.0       # after the ranks end, how long their captures may take to drain
MARKER_ENV = "EPCAP_CELL_DIR"
EXIT_LOG = "launcher.log"   # the local launcher's own record of the tasks that failed
EXIT_RECORD = "epcap local launcher: task {task} (pid {pid}) ended (exitcode: {code})"
# Tests only (no runbook or user sets it): `N` makes the first N forked tasks of this
# launcher, `@K` the K-th only, lose their log FIFO the way a slow fork server once made one
# lose it (issue 41): the capture gives up waiting and removes the FIFO before the server
# forks, so the rank's set-up fails (FileNotFoundError) -- a harness failure, made certain
# (tests/e2e/test_harness_failures.py).
LOSE_FIFO_ENV = "EPCAP_TEST_LOSE_FIFO"


def fifos_to_lose(value: str | None) -> set[int]:
    """The forked tasks (1-based, in start order) LOSE_FIFO_ENV's value names."""
    value = (value or "").strip()
    if value.startswith("@"):
        return {int(value[1:])}
    return set(range(1, int(value) + 1)) if value else set()


def log_size(paths: list[Path]) -> int:
    """Summed size of the logs that exist (log growth = progress)."""
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:
            pass
    return total


def _group_alive(pgid: int, marker: str | None) -> bool:
    """Whether process group `pgid` exists and (when checkable) belongs to this cell."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if marker is None:
        return True
    try:
        environ = Path(f"/proc/{pgid}/environ").read_bytes()
    except OSError:
        return True         # leader gone or no /proc: the group still exists; trust it
    return f"{MARKER_ENV}={marker}".encode() in environ.split(b"\0")


def kill_groups(pgids: list[int], marker: str | None = None) -> None:
    """SIGTERM each live group, wait briefly, then SIGKILL what is left."""
    live = [g for g in pgids if _group_alive(g, marker)]
    for pgid in live:
        _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_WAIT_S
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        live = [g for g in live if _group_exists(g)]
    for pgid in live:
        _signal_group(pgid, signal.SIGKILL)


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def marked_pids(marker: str) -> list[int]:
    """pids whose environment has EPCAP_CELL_DIR=<marker> exactly ([] without /proc)."""
    want = f"{MARKER_ENV}={marker}".encode()
    out = []
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if want in (entry / "environ").read_bytes().split(b"\0"):
                out.append(int(entry.name))
        except OSError:
            continue
    return sorted(out)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class _Job:
    """In-memory state of one running cell."""

    def __init__(self, procs: list[subprocess.Popen], logs: list[Path], timeout_s: float,
                 captures: list[subprocess.Popen] | None = None,
                 exit_log: Path | None = None):
        self.procs = procs
        self.exit_log = exit_log
        self.ended: set[int] = set()    # tasks whose end is recorded
        self.first_code: int | None = None  # the first non-zero exit seen (the run's code)
        self.captures = captures or []
        self.logs = logs
        self.timeout_s = timeout_s
        self.started = time.monotonic()
        self.last_size = -1
        self.last_growth = self.started
        self.first_fail: float | None = None
        self.result: JobResult | None = None
        self.harness: tuple[str, str] | None = None     # (what broke, its traceback)


# Fork servers started before any launcher exists (`prestart`: `epcap run` of a new campaign,
# harness/campaign/warm.py), by preload list; the first local launcher to need one adopts it.
_PRESTARTED: dict[tuple[str, ...], ForkServer] = {}


def start_server(preload: list[str]) -> ForkServer:
    """A fork server importing `preload`, in the harness's root with this environment."""
    return ForkServer(preload, str(HARNESS_ROOT), dict(os.environ))


def prestart(specs: list[LaunchSpec]) -> None:
    """Start now the fork server of every run here that forks from one, for the launcher made
    later to adopt (their imports then overlap the driver's own start-up)."""
    for spec in specs:
        preload = uses_forkserver(spec.argv, {**os.environ, **spec.env})
        if preload and tuple(preload) not in _PRESTARTED:
            _PRESTARTED[tuple(preload)] = start_server(preload)


def release_prestarted() -> None:
    """Kill and reap the prestarted servers no launcher adopted (the command failed first,
    or its launcher forks nothing): no run was asked of them, and one still importing would
    otherwise hold the command's exit until its import ends."""
    while _PRESTARTED:
        _, server = _PRESTARTED.popitem()
        if server.proc.poll() is None:
            server.proc.kill()
        server.close()


class LocalLauncher(Launcher):
    """Runs cells as local subprocess groups."""

    name = "local"
    poll_s = 0.01           # a poll is a waitpid and a select: cheap; ~100 runs a campaign

    def __init__(self, runbook=None) -> None:
        """`runbook` is accepted like every launcher's; local runs need nothing from it."""
        self._jobs: dict[str, _Job] = {}
        self._servers: dict[tuple[str, ...], ForkServer] = {}
        self._fifos_to_lose = fifos_to_lose(os.environ.get(LOSE_FIFO_ENV))
        self._forked = 0                # forked tasks started (LOSE_FIFO_ENV counts them)

    shared = True           # holds nothing of a runbook: a ladder's steps reuse its servers

    def close(self) -> None:
        """End the fork servers (each ends on EOF) and reap them: their forked runs' CPU
        then counts in this process's children (getrusage), and no idle server is left."""
        for server in self._servers.values():     # every server told first: they end
            server.end_input()                     # side by side
        for server in self._servers.values():
            server.close()
        self._servers.clear()

    def _server(self, preload: list[str]) -> ForkServer:
        """The fork server that pre-imported `preload` (started on first use, or the one
        `prestart` started for this process, adopted)."""
        key = tuple(preload)
        if key not in self._servers or self._servers[key].proc.poll() is not None:
            early = _PRESTARTED.pop(key, None)
            if early is not None and early.proc.poll() is not None:
                early.close()           # it died (its import failed): a new one says why
                early = None
            self._servers[key] = early or start_server(preload)
        return self._servers[key]

    def warm(self, specs: list[LaunchSpec]) -> None:
        """Start the fork server of every run here that forks from one (its import begins
        now, in its own process); a run without one needs nothing started."""
        for spec in specs:
            preload = uses_forkserver(spec.argv, {**os.environ, **spec.env})
            if preload:
                self._server(preload)

    def submit(self, cell_name: str, spec: LaunchSpec, cell_dir: Path,
               timeout_s: float) -> JobHandle:
        """Start spec.ntasks ranks now; returns a handle with their pids (= pgids)."""
        cell_dir = Path(cell_dir)
        cell_dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        procs: list = []
        logs: list[Path] = []
        captures: list[subprocess.Popen] = []
        try:
            for task in range(spec.ntasks):
                self._start_task(spec, task, cell_dir, port, timeout_s, procs, logs, captures)
        except BaseException:           # nothing of a half-started cell outlives it
            kill_groups([p.pid for p in procs])
            for cap in captures:
                cap.kill()
                cap.wait()
            raise
        pids = [p.pid for p in procs]
        self._jobs[str(pids[0])] = _Job(procs, logs, timeout_s, captures,
                                        cell_dir / EXIT_LOG)
        return JobHandle(cell_name=cell_name, cell_dir=cell_dir, job_id=str(pids[0]),
                         extra={"pids": pids, "pgids": pids, "port": port,
                                "marker": str(cell_dir.resolve())})

    def _start_task(self, spec: LaunchSpec, task: int, cell_dir: Path, port: int,
                    timeout_s: float, procs: list, logs: list[Path],
                    captures: list[subprocess.Popen]) -> None:
        """Start one task and its capture(s): one capture per rank; a task that starts its
        own ranks (spec.ranks_per_task > 1) gets one FIFO per rank, all read by one capture,
        and its own lines go to node<T>.log."""
        env = {**os.environ, **spec.env, "RANK": str(task), "LOCAL_RANK": str(task),
               "WORLD_SIZE": str(spec.ntasks), "LOCAL_WORLD_SIZE": str(spec.ntasks),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               MARKER_ENV: str(cell_dir.resolve())}
        per_task = max(1, int(spec.ranks_per_task))
        log_name = f"rank{task}.log"
        rank_fifos: list[tuple[Path, str]] = []
        if per_task > 1:            # one capture, one thread per rank's FIFO
            fifo_dir = Path(tempfile.mkdtemp(prefix="epcap-ranks-"))
            env[RANK_FIFOS_ENV] = str(fifo_dir)
            for rank in range(task * per_task, (task + 1) * per_task):
                fifo = fifo_dir / f"rank{rank}.fifo"
                os.mkfifo(fifo, 0o600)
                rank_fifos.append((fifo, f"rank{rank}.log"))
                logs.append(cell_dir / f"rank{rank}.log")
            log_name = f"node{task}.log"
        logs.append(cell_dir / log_name)
        preload = uses_forkserver(spec.argv, env)
        if preload:
            fifo = Path(tempfile.mkdtemp(prefix="epcap-rank-")) / "out.fifo"
            os.mkfifo(fifo, 0o600)
            self._forked += 1
            lose = self._forked in self._fifos_to_lose
            server, asked = self._server(preload), False
            if not lose:    # the server forks while the captures start (the child's open
                server.request(spec.argv, env, spec.cwd, str(fifo))     # waits for its reader)
                asked = True
            try:
                if rank_fifos:
                    captures.append(start_capture(cell_dir, task, spec.env, fifos=rank_fifos,
                                                  fifo_timeout_s=timeout_s))
                # The capture waits for its rank as long as the server may take to fork it
                # (its first request waits on the preload's import) plus the run's timeout: a
                # capture that gave up first removed the FIFO under a rank not yet forked
                # (issue 41).
                cap = start_capture(cell_dir, task, spec.env, fifos=[(fifo, log_name)],
                                    fifo_timeout_s=0 if lose else timeout_s + START_DEADLINE_S)
                captures.append(cap)
                if lose:            # tests: the capture gives up (1 s) and removes it first
                    cap.wait(timeout=30)
                    server.request(spec.argv, env, spec.cwd, str(fifo))
                    asked = True
            finally:                # a fork asked for is always known (and killed on failure)
                if asked:
                    procs.append(server.started())
        else:
            if rank_fifos:
                captures.append(start_capture(cell_dir, task, spec.env, fifos=rank_fifos,
                                              fifo_timeout_s=timeout_s))
            cap = start_capture(cell_dir, task, spec.env, log=log_name)
            captures.append(cap)
            procs.append(subprocess.Popen(
                spec.argv, env=env, cwd=spec.cwd, stdin=subprocess.DEVNULL,
                stdout=cap.stdin, stderr=subprocess.STDOUT, start_new_session=True))
            cap.stdin.close()

    def poll(self, handle: JobHandle) -> JobResult | None:
        """None while running; else how the cell ended (completed/failed/timeout)."""
        job = self._jobs.get(handle.job_id)
        if job is None:
            return JobResult(LauncherState.FAILED, None, [], None, "unknown job (launcher restarted)")
        if job.result is not None:
            return job.result
        now = time.monotonic()
        codes = [p.poll() for p in job.procs]
        record_exits(job, codes)
        broke = next((p for p in job.procs if getattr(p, "harness", None)), None)
        if broke is not None:           # the harness failed (fork server), not the run
            job.harness = (broke.harness, broke.harness_trace)
            self._kill(job)
            return self._finish(job, LauncherState.FAILED, job.first_code,
                                "harness failure")
        if all(c is not None for c in codes):
            return self._finish(job, LauncherState.COMPLETED if all(c == 0 for c in codes) else LauncherState.FAILED,
                                job.first_code or _first_failure(codes), "")
        size = log_size(job.logs)
        if size != job.last_size:
            job.last_size, job.last_growth = size, now
        if now - job.last_growth > job.timeout_s:
            self._kill(job)
            return self._finish(job, LauncherState.TIMEOUT, None,
                                f"no log growth for {job.timeout_s:g} s")
        if any(c not in (None, 0) for c in codes):
            job.first_fail = job.first_fail or now
            if now - job.first_fail > PEER_GRACE_S:
                self._kill(job)
                codes = [p.poll() if p.poll() is not None else p.wait() for p in job.procs]
                record_exits(job, codes)
                return self._finish(job, LauncherState.FAILED,
                                    job.first_code or _first_failure(codes),
                                    "peers killed after a rank failed")
        return None

    def cancel(self, handle: JobHandle) -> None:
        """Kill every rank's process group (also for a handle from an earlier driver)."""
        job = self._jobs.get(handle.job_id)
        if job is not None:
            self._kill(job)
            if job.result is None:
                self._finish(job, LauncherState.CANCELLED, None, LauncherState.CANCELLED)
            return
        pgids = [int(p) for p in handle.extra.get("pgids", [])]
        kill_groups(pgids, handle.extra.get("marker"))

    def find_existing(self, cell_name: str, cell_dir: Path) -> JobHandle | None:
        """Processes of this cell still alive from an earlier driver (found via /proc)."""
        marker = str(Path(cell_dir).resolve())
        pids = marked_pids(marker)
        if not pids:
            return None
        pgids = sorted({_pgid(p) for p in pids} - {None})
        return JobHandle(cell_name=cell_name, cell_dir=Path(cell_dir), job_id=str(pids[0]),
                         extra={"pids": pids, "pgids": pgids, "marker": None})

    def _kill(self, job: _Job) -> None:
        kill_groups([p.pid for p in job.procs])
        for proc in job.procs:
            try:
                proc.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass

    def _finish(self, job: _Job, state: str, code: int | None, detail: str) -> JobResult:
        # reap any rank of a finished job, and kill strays left in the groups
        kill_groups([p.pid for p in job.procs])
        drain(job.captures)
        harness, trace = job.harness or (None, "")
        job.result = JobResult(state, code, list(job.logs),
                               round(time.monotonic() - job.started, 3), detail,
                               harness=harness, harness_trace=trace)
        return job.result


def record_exits(job: _Job, codes: list[int | None]) -> None:
    """Append an exit record for each task newly seen ending non-zero (in the order seen)."""
    lines = []
    for task, (proc, code) in enumerate(zip(job.procs, codes, strict=True)):
        if code is None or task in job.ended:
            continue
        job.ended.add(task)
        if code != 0:
            job.first_code = code if job.first_code is None else job.first_code
            lines.append(EXIT_RECORD.format(task=task, pid=proc.pid, code=code) + "\n")
    if lines and job.exit_log is not None:
        try:
            with open(job.exit_log, "a", encoding="utf-8") as fh:
                fh.writelines(lines)
        except OSError:
            pass        # evidence only: the run's own outcome does not depend on it


def start_capture(cell_dir: Path, rank: int, spec_env: dict[str, str],
                  fifos: list[tuple[Path, str | None]] | None = None,
                  fifo_timeout_s: float | None = None,
                  log: str | None = None) -> subprocess.Popen:
    """The rank's capture process (redacts, writes rank<R>.log, or `log`): stdin is the
    rank's pipe, or `fifos`, (FIFO, log name or None for rank<R>.log) pairs read one thread
    each, a FIFO given up after `fifo_timeout_s` when no rank opens it. Without the cell
    marker in its environment (it is no rank of the cell)."""
    env = {k: v for k, v in {**os.environ, **spec_env}.items() if k != MARKER_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HARNESS_ROOT),
                                                      env.get("PYTHONPATH")]))
    # -S: no site (the capture imports only the standard library and harness/, found on
    # PYTHONPATH), ~10 ms of each capture's start-up; nor a sitecustomize meant for the ranks
    argv = [sys.executable, "-S", "-m", "harness.launch.capture",
            str(Path(cell_dir).resolve()), "--rank", str(rank)]
    pairs = list(fifos or [])
    for path, name in pairs:
        argv += ["--fifo", str(path)] + (["--log", name] if name is not None else [])
    if pairs and fifo_timeout_s is not None:
        argv += ["--fifo-timeout", f"{max(1.0, float(fifo_timeout_s)):g}"]
    if not pairs and log is not None:
        argv += ["--log", log]
    proc = subprocess.Popen(argv, env=env, cwd=str(HARNESS_ROOT),
                            stdin=subprocess.DEVNULL if pairs else subprocess.PIPE,
                            start_new_session=True)
    proc.fifos = [path for path, _ in pairs]    # type: ignore[attr-defined]  # drain()
    return proc


def drain(captures: list[subprocess.Popen]) -> None:
    """Wait for the captures to write their last lines (they end at their ranks' EOF). A
    capture still waiting for a writer on a FIFO (its rank never started: the task failed
    first) is released by opening and closing the FIFO's write end: it reads EOF and ends."""
    deadline = time.monotonic() + CAPTURE_WAIT_S
    waiting = [c for c in captures if getattr(c, "fifos", None)]
    while waiting and time.monotonic() < deadline:
        for cap in waiting:     # a capture not yet in open() is released on a later pass
            for fifo in cap.fifos:
                release_fifo(fifo)  # opened and removed by the capture, or no reader yet
        waiting = [c for c in waiting
                   if c.poll() is None and any(Path(f).exists() for f in c.fifos)]
        if waiting:
            time.sleep(0.05)
    for cap in captures:
        try:
            cap.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            cap.kill()
            cap.wait()


def _first_failure(codes: list[int | None]) -> int | None:
    """The first non-zero exit code (negative = killed by that signal), else 0."""
    for code in codes:
        if code not in (None, 0):
            return code
    return 0 if all(c == 0 for c in codes) else None
