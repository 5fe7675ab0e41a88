"""A fork server for the local launcher: import heavy modules (torch) once, fork each run.

A run whose LaunchSpec env names modules in PREFORK_ENV (e.g. the reference backend with
`launch: forked`) and whose argv is `python -m MODULE ARGS...` is not exec'd: the local
launcher asks a server process that has already imported those modules to fork a child,
which starts a new session, points stdin at /dev/null and stdout/stderr at the rank's log,
takes the run's environment and cwd, and runs MODULE as __main__. What such a child does
NOT get that a fresh interpreter would: a new address-space layout (ASLR is inherited),
fresh module state (imports are shared, copy-on-write) and fresh interpreter start-up. It
does get a new process, pid, session, file descriptors, environment, allocator arena use
from here on, and its own torch.distributed group. The server saves ~1.5 s of CPU per run
(torch's import), which is what lets the CPU campaign afford several timing launches.

Protocol (JSON lines): request {"argv", "env", "cwd", "log"} on the server's stdin; reply
{"pid"} at once, then {"exit": {"pid", "code"}} when that child ends (code as
subprocess.Popen.returncode: negative = killed by that signal). EOF on stdin (the driver
died or closed it): the server kills its children's sessions and exits.

A child that fails while it sets the run up (its session, its log FIFO, cwd, env: the
harness's part, before the run's module starts) writes the traceback to its status pipe
instead of a terminal; the exit reply then carries {"harness": "<traceback>"}, and the launcher
records the cell as a harness failure (docs/taxonomy.md#harness-failures), not the run's. The
server's own stderr (a preload that fails to import) goes to an unlinked temporary file the
launcher keeps open (nothing is left behind), whose end the error naming its death quotes and
carries (`ForkServerDied.detail`, written to the cell's harness.txt).
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback

PREFORK_ENV = "EPCAP_PREFORK"
START_DEADLINE_S = 60.0         # how long started() waits for the server to name a child
TRACE_BYTES = 8192              # a setup traceback's bound (the status pipe is never full)


class ForkServerDied(RuntimeError):
    """The fork server process ended (killed, or its preload failed to import): its runs'
    exits can no longer be known. A harness failure, never the run's. `detail`: the end of
    the server's own stderr (its traceback), for the cell's harness.txt."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


def _run_child(req: dict, fds: list[int], ready: int) -> None:
    """In the forked child: session, fds, env, cwd, then the module as __main__; never returns."""
    code = 1
    try:
        os.setsid()                  # then tell the server: pid == pgid from now on
        os.write(ready, b"s")
        for fd in fds:
            os.close(fd)
    except BaseException:                                    # noqa: BLE001 - report and exit
        os._exit(_setup_failed(ready))
    try:
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        os.chdir(req["cwd"] or ".")
        os.environ.clear()
        os.environ.update(req["env"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        argv = req["argv"]
        sys.path.insert(0, os.getcwd())
        sys.argv = [argv[2], *argv[3:]]
    except BaseException:                                    # noqa: BLE001 - report and exit
        os._exit(_setup_failed(ready))
    os.close(ready)                  # set up: from here on, a failure is the run's own
    try:
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:                                    # noqa: BLE001 - report and exit
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:                                # noqa: BLE001
                pass
        os._exit(code)


def _setup_failed(status: int) -> int:
    """In a child whose set-up failed: its traceback to the status pipe (bounded), exit 1."""
    text = traceback.format_exc().encode("utf-8", "backslashreplace")
    try:
        os.write(status, b"E" + text[-TRACE_BYTES:])
    except OSError:
        pass
    return 1


def _read_status(fd: int, first: bytes) -> str | None:
    """A reaped child's status pipe (`first`: the byte already read, "s" once it had its
    session): its set-up traceback, or None (it set up and ran its module)."""
    data = first
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except OSError:
        pass
    finally:
        os.close(fd)
    data = data.removeprefix(b"s")
    if not data.startswith(b"E"):
        return None
    return data[1:].decode("utf-8", "replace")


def serve(preload: list[str]) -> int:
    """The server loop: import `preload`, then fork on requests and report exits."""
    for name in preload:
        importlib.import_module(name)
    req_fd, reply_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)               # a stray print can never corrupt the protocol
    children: set[int] = set()
    status: dict[int, tuple[int, bytes]] = {}   # child pid -> its status pipe, first byte
    buf = b""

    def reply(obj: dict) -> None:
        os.write(reply_fd, (json.dumps(obj) + "\n").encode())

    while True:
        ready, _, _ = select.select([req_fd], [], [], 0.02)
        if ready:
            chunk = os.read(req_fd, 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                req = json.loads(line)
                sys.stdout.flush()
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(r)
                    _run_child(req, [req_fd, reply_fd, null,
                                     *(fd for fd, _ in status.values())], w)
                os.close(w)
                # the child has its own session (b"s"), or failed before (b"E...", b"")
                status[pid] = (r, os.read(r, 1))
                children.add(pid)
                reply({"pid": pid})
        for pid in list(children):
            done, wstatus = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                exit_msg = {"pid": pid, "code": os.waitstatus_to_exitcode(wstatus)}
                trace = _read_status(*status.pop(pid))
                if trace is not None:
                    exit_msg["harness"] = trace
                reply({"exit": exit_msg})
    for pid in children:                       # the driver went away: leave nothing behind
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
    for pid in children:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return 0


class ForkServer:
    """The launcher's handle on one server process (started lazily, one per preload list)."""

    def __init__(self, preload: list[str], cwd: str | None, env: dict) -> None:
        # the server's own stderr (a preload's import error): a file, never the terminal
        self.log_fd, path = tempfile.mkstemp(prefix="epcap-forkserver-", suffix=".log")
        os.unlink(path)                        # open here and in the server only
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.launch.forkserver",
                                      *preload], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log_fd, cwd=cwd,
                                     env=env, start_new_session=True)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buf = b""
        self.exits: dict[int, int] = {}
        self.harness: dict[int, str] = {}      # pid -> the traceback of its failed set-up
        self.pids: list[int] = []
        self.died: str | None = None           # why the server is gone, once it is
        self.died_detail = ""                  # the end of its stderr then

    def _pump(self, timeout: float) -> None:
        if self.died is not None:
            raise ForkServerDied(self.died, self.died_detail)
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            self.died = self.death()
            raise ForkServerDied(self.died, self.died_detail)
        self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            msg = json.loads(line)
            if "pid" in msg:
                self.pids.append(int(msg["pid"]))
            else:
                pid = int(msg["exit"]["pid"])
                if msg["exit"].get("harness"):
                    self.harness[pid] = str(msg["exit"]["harness"])
                self.exits[pid] = int(msg["exit"]["code"])

    def death(self) -> str:
        """Why the server ended, in one line: its exit status and its stderr's last line."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        try:
            size = os.fstat(self.log_fd).st_size
            tail = os.pread(self.log_fd, 65536, max(0, size - 65536))
            self.died_detail = tail.decode("utf-8", "replace")
        except OSError:
            self.died_detail = ""
        last = [ln.strip() for ln in self.died_detail.splitlines() if ln.strip()]
        said = f" ({last[-1][:300]})" if last else ""
        return f"the fork server exited with {code}{said}"

    def start(self, argv: list[str], env: dict, cwd: str | None, log: str) -> ForkedProcess:
        """Fork one run; returns once the server names its pid."""
        self.request(argv, env, cwd, log)
        return self.started()

    def request(self, argv: list[str], env: dict, cwd: str | None, log: str) -> None:
        """Ask for one run's fork and return at once (`started()` gives it): the server forks
        while the caller starts the run's captures."""
        req = {"argv": list(argv), "env": dict(env), "cwd": cwd, "log": str(log)}
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.died = self.death()
            raise ForkServerDied(self.died, self.died_detail) from None

    def started(self) -> ForkedProcess:
        """The run asked for first and not yet returned, once the server names its pid."""
        deadline = time.monotonic() + START_DEADLINE_S
        while not self.pids:
            if time.monotonic() > deadline:
                raise ForkServerDied(f"the fork server did not answer within "
                                     f"{START_DEADLINE_S:g} s")
            self._pump(0.5)
        return ForkedProcess(self, self.pids.pop(0))

    def end_input(self) -> None:
        """EOF on the server's stdin: it kills its children's sessions and exits."""
        if not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass                            # it is gone already: close() reaps it

    def close(self) -> None:
        """EOF on the server's stdin (it kills its children's sessions and exits), then reap
        it; one that does not exit within 10 s is killed."""
        if self.proc.poll() is None:
            self.end_input()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.close(self.log_fd)
        except OSError:
            pass


class ForkedProcess:
    """The subset of subprocess.Popen the local launcher uses: pid, poll(), wait(); and
    `harness`: what the harness failed at (its set-up, the server's death), else None."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid, self.returncode = server, pid, None
        self.harness: str | None = None
        self.harness_trace = ""

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.server._pump(0)
            except ForkServerDied as exc:
                if self.pid not in self.server.exits:
                    self._lost(str(exc))
                    return self.returncode
            self.returncode = self.server.exits.get(self.pid)
            trace = self.server.harness.get(self.pid)
            if self.returncode is not None and trace is not None:
                last = [ln for ln in trace.splitlines() if ln.strip()]
                self.harness = ("a forked rank failed in the harness's set-up, before its "
                                f"module ran: {last[-1].strip() if last else 'no traceback'}")
                self.harness_trace = trace
        return self.returncode

    def _lost(self, why: str) -> None:
        """The server is gone: this rank's exit can no longer be known. Its session is
        killed (so nothing of it outlives the cell) and it counts as ended by SIGKILL."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        self.harness = why
        self.returncode = -signal.SIGKILL

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            try:
                self.server._pump(0.05)
            except ForkServerDied:
                continue                       # poll() records it
        return self.returncode


def uses_forkserver(argv: list[str], env: dict) -> list[str]:
    """The preload list when this run may be forked (`python -m MODULE`), else []."""
    preload = [m for m in env.get(PREFORK_ENV, "").split(",") if m]
    if preload and len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m":
        return preload
    return []


if __name__ == "__main__":
    code = serve(sys.argv[1:])
    sys.stderr.flush()
    # no interpreter teardown: the preload (torch) takes ~0.35 s to finalise, and the server
    # holds nothing to flush (replies are os.write()s, its children are reaped above)
    os._exit(code)
