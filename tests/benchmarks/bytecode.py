"""The benchmarks time a checkout as an installed epcap runs: with its modules' bytecode cached.

Python writes a module's bytecode (__pycache__/*.pyc) at its first import, unless
PYTHONDONTWRITEBYTECODE is set, as it is in some sandboxes and CI images; there every process
compiles the harness from source again (measured 7 Dec 2026: `epcap parse` of a one-line log
0.13 s without the cache, 0.07 s with it). Each benchmark compiles every checkout it times, so
this one and an old one are timed alike whatever the environment says.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def compile_bytecode(checkout: Path) -> str:
    """Compile `checkout`'s harness package to bytecode (`python -m compileall`, what pip does
    at install); the line to print, naming the environment's setting."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "harness"], cwd=checkout,
                   check=True, stdout=subprocess.DEVNULL)
    setting = os.environ.get("PYTHONDONTWRITEBYTECODE")
    said = f"PYTHONDONTWRITEBYTECODE={setting}" if setting else "PYTHONDONTWRITEBYTECODE unset"
    return f"bytecode of {checkout}/harness compiled before timing ({said})"
