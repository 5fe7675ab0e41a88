"""`epcap ARGS` in a child process with fake ranks (the concurrency test's first run)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import harness.campaign.cli as campaign_cli  # noqa: E402
from harness.cli import main  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import FakeLauncher  # noqa: E402

campaign_cli.make_launcher = lambda name, rb=None: FakeLauncher()

if __name__ == "__main__":
    main(sys.argv[1:], prog_name="epcap")
