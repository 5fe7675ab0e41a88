"""Paths that enter from a runbook, and paths epcap writes.

A relative path in a runbook means the same file wherever epcap is started: it resolves
against the runbook's folder (like `models_file` and `repositories`), never the current
directory or the checkout a backend runs in. Every path epcap writes for a campaign is
checked to lie under the results root (--results) before it is created.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import BadInput


def resolve_against(value: str, base: Path) -> str:
    """`value` as an absolute path: unchanged when absolute, else joined to `base` (the
    runbook's folder), made absolute, `..` collapsed lexically (the file may not exist yet)."""
    path = Path(os.path.expanduser(value))
    if path.is_absolute():
        return str(path)
    return os.path.normpath(os.path.abspath(Path(base) / path))


def lies_under(path: Path, root: Path) -> bool:
    """True when `path` (links resolved as far as they exist) is `root` or inside it."""
    real, top = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return real == top or top in real.parents


def check_under(path: Path, root: Path, field: str | None = None) -> Path:
    """`path` when it lies under `root`; BadInput naming it otherwise (a link or a name that
    would make epcap write outside the results directory)."""
    if not lies_under(path, root):
        raise BadInput(f"would be written outside the results directory {root}: refused",
                       path=str(path), field=field)
    return Path(path)
