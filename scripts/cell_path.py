#!/usr/bin/env python3
"""Which repository files a campaign's driver process runs code from (docs/architecture.md).

    python scripts/cell_path.py OUT.txt run RUNBOOK --results DIR --until validate

runs `epcap ...` in this process with a profile hook and writes, in first-call order, the
files under harness/ and backends/ whose functions were called (module bodies, class bodies
and tests excluded): the files a reader opens to follow the cells of that run.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CO_NEWLOCALS = 0x2          # set on function code objects only (not module or class bodies)


def main() -> None:
    out, sys.argv = Path(sys.argv[1]), ["epcap", *sys.argv[2:]]
    seen: list[str] = []

    def profile(frame, event, _arg) -> None:
        code = frame.f_code
        path = code.co_filename
        if (event == "call" and code.co_flags & CO_NEWLOCALS and path not in seen
                and path.startswith((str(ROOT / "harness"), str(ROOT / "backends")))
                and "/tests/" not in path):
            seen.append(path)

    sys.setprofile(profile)
    try:
        runpy.run_module("harness.cli", run_name="__main__")
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
        out.write_text("".join(f"{Path(p).relative_to(ROOT)}\n" for p in seen), encoding="utf-8")


if __name__ == "__main__":
    main()
