"""External tools' output (git, nvidia-smi): run with a deadline, decoded as UTF-8, and
every failure named as what it is -- the tool is missing, it refused, it failed, it did not
answer, its output is unreadable -- with the command that would show it. Never a traceback,
never blamed on a path."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass

from harness.io.bounds import clip_line

OUTPUT_MAX_CHARS = 1 << 20          # what is kept of one tool's stdout


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
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, cwd=cwd, env=env, check=False)
    except subprocess.TimeoutExpired:
        return ToolRun(argv, None, problem=f"{name} did not answer within {timeout_s:g} s "
                       f"(run `{shlex.join(argv)}` to see why)")
    except OSError as exc:
        return ToolRun(argv, None, problem=f"{name} could not start: "
                       f"{exc.strerror or type(exc).__name__}", missing=True)
    out, bad_out = _decode(proc.stdout, name, "output")
    err, _ = _decode(proc.stderr, name, "error output")
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
