"""External tools' output (git, nvidia-smi): run with a deadline, decoded as UTF-8, and
every failure named as what it is -- the tool is missing, it refused, it failed, it did not
answer, its output is unreadable -- with the command that would show it. Never a traceback,
never blamed on a path."""

from __future__ import annotations

import os
import re
import selectors
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass

from harness.io.bounds import clip_line

OUTPUT_MAX_CHARS = 1 << 20          # what is kept of one tool's stdout
OUTPUT_MAX_BYTES = 4 << 20          # a tool that says more is stopped and refused (a flood)
READ_CHUNK = 1 << 16
FLOODED = "refused, not stored"     # the words of a flood's problem (callers look for them)
# a git object name: "their 40 hexadecimal digit SHA-1 name or 64 hexadecimal digit SHA-256
# name" (git/git Documentation/technical/hash-function-transition.adoc, section "Object
# names", read at commit d477892b30b25333badb829190eb349fb671458c); lowercase as `%H` prints
COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass(frozen=True)
class ToolRun:
    """One run of an external tool: exit code, decoded output, and what went wrong."""

    argv: tuple[str, ...]
    code: int | None
    out: str = ""
    err: str = ""
    problem: str | None = None       # None: it ran, answered in UTF-8 and exited 0
    missing: bool = False            # the tool is not installed (not on PATH)

    @property
    def ok(self) -> bool:
        """True when the tool ran, answered in UTF-8 and exited 0."""
        return self.problem is None

    @property
    def shown(self) -> str:
        """The command a user runs to see the same answer."""
        return shlex.join(self.argv)


def _decode(data: bytes, name: str, what: str) -> tuple[str, str | None]:
    """(text, None), or (text with replacements, why) for output that is not UTF-8."""
    try:
        return data.decode("utf-8")[:OUTPUT_MAX_CHARS], None
    except UnicodeDecodeError as exc:
        return (data.decode("utf-8", "replace")[:OUTPUT_MAX_CHARS],
                f"{name}'s {what} is not UTF-8 (invalid byte at offset {exc.start})")


def commit_problem(text: str) -> str | None:
    """Why `text` (a tool's answer) is not a commit id: 40 or 64 lowercase hex digits."""
    if COMMIT.fullmatch(text):
        return None
    return f"its answer is not a commit id (40 or 64 hex digits): {clip_line(ascii(text), 60)}"


def _capture(proc: subprocess.Popen, timeout_s: float) -> tuple[bytes, bytes, str | None]:
    """Both pipes of `proc` read to their end within `timeout_s`, each at most
    OUTPUT_MAX_BYTES: (stdout, stderr, None), or what is read so far and "timeout"/"flood"
    (the process is then killed)."""
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    deadline = time.monotonic() + timeout_s
    why = None
    with selectors.DefaultSelector() as sel:
        for pipe in bufs:
            sel.register(pipe, selectors.EVENT_READ)
        while sel.get_map() and why is None:
            left = deadline - time.monotonic()
            if left <= 0:
                why = "timeout"
                break
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, READ_CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                bufs[key.fileobj] += chunk
                if len(bufs[key.fileobj]) > OUTPUT_MAX_BYTES:
                    why = "flood"
                    break
    if why is None:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            why = "timeout"
    if why is not None:
        proc.kill()
        proc.wait()
    for pipe in bufs:
        pipe.close()
    return bytes(bufs[proc.stdout]), bytes(bufs[proc.stderr]), why


def run_tool(argv: list[str] | tuple[str, ...], *, timeout_s: float,
             cwd: str | None = None, env: dict[str, str] | None = None) -> ToolRun:
    """Run `argv` (a list, never a shell) within `timeout_s`; a ToolRun whose `problem` says
    what failed, naming the tool and the command that shows it."""
    argv = tuple(str(a) for a in argv)
    name = os.path.basename(argv[0])
    exe = argv[0] if os.path.sep in argv[0] else shutil.which(argv[0])
    if exe is None:
        return ToolRun(argv, None, problem=f"{name} is not installed (not on PATH)",
                       missing=True)
    try:
        proc = subprocess.Popen([exe, *argv[1:]], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=cwd,
                                env=env)
    except OSError as exc:
        return ToolRun(argv, None, problem=f"{name} could not start: "
                       f"{exc.strerror or type(exc).__name__}", missing=True)
    stdout, stderr, stopped = _capture(proc, timeout_s)
    if stopped == "timeout":
        return ToolRun(argv, None, problem=f"{name} did not answer within {timeout_s:g} s "
                       f"(run `{shlex.join(argv)}` to see why)")
    if stopped == "flood":
        return ToolRun(argv, proc.returncode, problem=f"{name} answered more than "
                       f"{OUTPUT_MAX_BYTES} bytes: {FLOODED} (run `{shlex.join(argv)}` "
                       f"to see it)")
    out, bad_out = _decode(stdout, name, "output")
    err, _ = _decode(stderr, name, "error output")
    if proc.returncode != 0:
        first = next((ln.strip() for ln in (err or out).splitlines() if ln.strip()), "")
        return ToolRun(argv, proc.returncode, out, err, problem=clip_line(
            f"{name} failed (exit {proc.returncode})" + (f": {first}" if first else "")
            + f" (run `{shlex.join(argv)}` to see it)", 300))
    if bad_out is not None:
        return ToolRun(argv, proc.returncode, out, err,
                       problem=f"{bad_out} (run `{shlex.join(argv)}` to see it)")
    return ToolRun(argv, proc.returncode, out, err)


def git_problem(run: ToolRun, repo: str) -> str | None:
    """What a failed git call says about `repo`: git missing, a repository of another owner
    (dubious ownership), or not a git checkout; None when it ran."""
    if run.ok:
        return None
    if run.missing:
        return f"git is not installed (not on PATH): cannot read {repo}"
    if "dubious ownership" in run.err:
        return (f"git refuses {repo}: dubious ownership (it belongs to another user); run "
                f"`git -C {shlex.quote(repo)} status` to see it, and `git config --global "
                f"--add safe.directory {shlex.quote(repo)}` if you trust it")
    if "not a git repository" in run.err:
        return f"{repo} is not a git checkout (run `git -C {shlex.quote(repo)} status` to see it)"
    return run.problem
