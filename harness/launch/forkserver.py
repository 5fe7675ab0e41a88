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
import time
import traceback

PREFORK_ENV = "EPCAP_PREFORK"


def _run_child(req: dict, fds: list[int], ready: int) -> None:
    """In the forked child: session, fds, env, cwd, then the module as __main__; never returns."""
    code = 1
    try:
        os.setsid()                  # then tell the server: pid == pgid from now on
        os.write(ready, b"s")
        os.close(ready)
        for fd in fds:
            os.close(fd)
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


def serve(preload: list[str]) -> int:
    """The server loop: import `preload`, then fork on requests and report exits."""
    for name in preload:
        importlib.import_module(name)
    req_fd, reply_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)               # a stray print can never corrupt the protocol
    children: set[int] = set()
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
                    _run_child(req, [req_fd, reply_fd, null], w)
                os.close(w)
                os.read(r, 1)            # the child has its own session (or has died)
                os.close(r)
                children.add(pid)
                reply({"pid": pid})
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                reply({"exit": {"pid": pid, "code": os.waitstatus_to_exitcode(status)}})
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
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.launch.forkserver",
                                      *preload], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     cwd=cwd, env=env, start_new_session=True)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buf = b""
        self.exits: dict[int, int] = {}
        self.pids: list[int] = []

    def _pump(self, timeout: float) -> None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            raise RuntimeError(f"fork server exited with {self.proc.wait()}")
        self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            msg = json.loads(line)
            if "pid" in msg:
                self.pids.append(int(msg["pid"]))
            else:
                self.exits[int(msg["exit"]["pid"])] = int(msg["exit"]["code"])

    def start(self, argv: list[str], env: dict, cwd: str | None, log: str) -> ForkedProcess:
        """Fork one run; returns once the server names its pid."""
        req = {"argv": list(argv), "env": dict(env), "cwd": cwd, "log": str(log)}
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + 60
        while not self.pids:
            if time.monotonic() > deadline:
                raise RuntimeError("fork server did not answer within 60 s")
            self._pump(0.5)
        return ForkedProcess(self, self.pids.pop(0))

    def close(self) -> None:
        """EOF on the server's stdin (it kills its children's sessions and exits), then reap
        it; one that does not exit within 10 s is killed."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ForkedProcess:
    """The subset of subprocess.Popen the local launcher uses: pid, poll(), wait()."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid, self.returncode = server, pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server._pump(0)
            self.returncode = self.server.exits.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            self.server._pump(0.05)
        return self.returncode


def uses_forkserver(argv: list[str], env: dict) -> list[str]:
    """The preload list when this run may be forked (`python -m MODULE`), else []."""
    preload = [m for m in env.get(PREFORK_ENV, "").split(",") if m]
    if preload and len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m":
        return preload
    return []


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
