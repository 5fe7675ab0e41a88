"""The documentation's fenced examples and the sandbox they run in: shared by the doc test
(tests/unit/test_doc_examples.py) and by the session fixture that runs README's first
session once for every test that reads the default campaign (tests/conftest.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([A-Za-z]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"^\*\(not run by the doc test: ([^)]+)\)\*$")
# README's first session: the block whose bare `epcap run` runs the default campaign.
DEFAULT_RUN_LINE = re.compile(r"^\.venv/bin/epcap run[ \t]*(#.*)?$", re.M)


def examples() -> list[tuple[str, int, str, str, str | None]]:
    """(doc, line, language, body, why not run) of every fenced block."""
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            before = text[:m.start()].rstrip("\n").splitlines()
            why = NOT_RUN.match(before[-1].strip()) if before else None
            if why is None and len(before) > 1:   # a reason may wrap onto two lines
                why = NOT_RUN.match(" ".join(x.strip() for x in before[-2:]))
            out.append((str(doc.relative_to(ROOT)), line, m.group(1), m.group(2),
                        why.group(1) if why else None))
    return out


def first_session() -> tuple[str, int, str, str, str | None]:
    """README's one sh block that runs the default campaign with a bare `epcap run`."""
    (found,) = [e for e in examples() if e[0] == "README.md" and e[2] == "sh"
                and e[4] is None and DEFAULT_RUN_LINE.search(e[3])]
    return found


def sandbox(where: Path) -> Path:
    """A directory like a checkout after `make venv`: .venv and a copy of runbooks/."""
    box = where / "box"
    box.mkdir()
    (box / ".venv").symlink_to(Path(sys.prefix))
    shutil.copytree(ROOT / "runbooks", box / "runbooks")
    return box


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def run_shell(body: str, box: Path) -> subprocess.CompletedProcess:
    """An sh example as a user pastes it: bash -e -o pipefail, in the sandbox."""
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=box, env=env(),
                          capture_output=True, text=True, timeout=900)
