"""Slurm time strings, parsed and written in one place: a runbook's `slurm.time_limit`
(sbatch --time), sacct's Elapsed, and the dry run's GPU-hours estimate all read them here.

The forms sbatch accepts: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, and UNLIMITED /
INFINITE (no limit).
"""

from __future__ import annotations

import re

from harness.errors import BadInput

TIME_RE = re.compile(r"^(?:\d+-\d{1,2}(?::\d{1,2}){0,2}|\d+(?::\d{1,2}){0,2}|UNLIMITED|INFINITE)$")
NO_LIMIT = ("UNLIMITED", "INFINITE")


def time_minutes(text: str) -> float:
    """Minutes in a Slurm time string; inf for UNLIMITED / INFINITE. ValueError for a string
    that is not one of the forms above (a negative part, four parts, a stray word)."""
    text = str(text).strip()
    if text.upper() in NO_LIMIT:
        return float("inf")
    days, dash, clock = text.rpartition("-")
    if dash and not days:
        raise ValueError(f"not a Slurm time: {text!r}")
    parts = [int(p) for p in clock.split(":")]          # ValueError for a non-number
    day_count = int(days) if dash else 0
    if len(parts) > 3 or min(parts + [day_count]) < 0:
        raise ValueError(f"not a Slurm time: {text!r}")
    if len(parts) == 3:
        hours, minutes, seconds = parts
    elif dash:                                           # D-HH or D-HH:MM
        hours, minutes, seconds = (parts + [0, 0])[:3]
    else:                                                # MM or MM:SS
        hours, minutes, seconds = 0, parts[0], (parts + [0])[1]
    return day_count * 1440 + hours * 60 + minutes + seconds / 60


def parse_time_limit(text: str, field: str = "slurm.time_limit") -> float:
    """A finite Slurm time limit in hours (an estimate needs one); BadInput naming `field`."""
    try:
        minutes = time_minutes(text)
    except ValueError:
        minutes = float("inf")
    if minutes == float("inf"):
        raise BadInput(f"bad time limit {text!r}", field=field)
    return minutes / 60


def elapsed_seconds(text: str) -> float | None:
    """Seconds in sacct's [D-]HH:MM:SS (or MM:SS) Elapsed text; None when it is not one."""
    if not text or not re.match(r"^(\d+-)?[\d:]+$", text):
        return None
    try:
        return time_minutes(text if "-" in text or text.count(":") == 2 else f"0:{text}") * 60
    except ValueError:
        return None


def format_time(seconds: float) -> str:
    """A duration as sbatch --time takes it: HH:MM:SS, or D-HH:MM:SS from a day up (whole
    seconds, rounded up so a limit is never shortened)."""
    total = max(0, -int(-seconds // 1))
    days, rest = divmod(total, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock
