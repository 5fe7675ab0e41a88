"""harness/campaign/warm.py: a plain `epcap run` of a new local campaign starts its fork
servers before the driver is imported, and the local launcher adopts them; a resumed
campaign, another launcher, a runbook that fails to load or an in-process caller starts
nothing; a command that fails after the head start leaves no server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backends.megatron_core.adapter import PRELOAD
from harness.campaign import warm
from harness.launch import local
from harness.launch.local import LocalLauncher, release_prestarted

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "runbooks" / "local-cpu.yaml"
SERVERS = sorted([("backends.reference.worker",), tuple(PRELOAD.split(","))])


@pytest.fixture
def outside_the_driver(monkeypatch):
    """As `epcap run` is before it imports the driver (this suite imported it already)."""
    monkeypatch.delitem(sys.modules, warm.DRIVER, raising=False)
    yield
    release_prestarted()


def test_a_new_local_campaign_starts_every_backends_server_and_the_launcher_adopts_it(
        tmp_path, outside_the_driver):
    assert warm.prestart_servers(str(DEFAULT), str(tmp_path / "results"), None)
    assert sorted(local._PRESTARTED) == SERVERS
    started = dict(local._PRESTARTED)
    launcher = LocalLauncher()
    try:
        adopted = launcher._server(["backends.reference.worker"])
        assert adopted is started[("backends.reference.worker",)]
        assert sorted(local._PRESTARTED) == [tuple(PRELOAD.split(","))]    # the other waits
    finally:
        launcher.close()
    other = started[tuple(PRELOAD.split(","))]
    release_prestarted()            # the one not adopted: killed mid-import, not waited for
    assert other.proc.returncode == -9 and local._PRESTARTED == {}
    assert not (tmp_path / "results").exists()      # the head start writes nothing


@pytest.mark.parametrize("case", ["existing campaign", "slurm launcher", "no such runbook",
                                  "bad runbook"])
def test_nothing_is_started_where_the_driver_decides(tmp_path, outside_the_driver, case):
    results, runbook, launcher = tmp_path / "results", str(DEFAULT), None
    if case == "existing campaign":
        (results / "local-cpu").mkdir(parents=True)
    elif case == "slurm launcher":
        launcher = "slurm"
    elif case == "no such runbook":
        runbook = str(tmp_path / "missing.yaml")
    else:
        runbook = str(tmp_path / "bad.yaml")
        Path(runbook).write_text("campaign: [unclosed\n")
    assert not warm.prestart_servers(runbook, str(results), launcher)
    assert local._PRESTARTED == {}


def test_an_in_process_caller_starts_nothing(tmp_path):
    """The driver imported already (tests that patch its launcher, a ladder's steps):
    nothing to overlap, and a fake launcher would leave the servers unused."""
    import harness.campaign.cli  # noqa: F401
    assert not warm.prestart_servers(str(DEFAULT), str(tmp_path / "results"), None)
    assert local._PRESTARTED == {}


def test_a_run_that_fails_after_the_head_start_leaves_no_fork_server(tmp_path):
    """--results lies under a file: the head start starts the servers (no campaign there),
    then the run cannot create the directory (exit 2): the servers are killed, not left
    importing (seen red with the command releasing nothing)."""
    (tmp_path / "a-file").write_text("")
    results = tmp_path / "a-file" / "results"
    name, value = "EPCAP_WARM_TEST", f"{os.getpid()}-{time.monotonic_ns()}"
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(DEFAULT),
                           "--results", str(results)], cwd=ROOT, env={**os.environ, name: value},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    marker, left = f"{name}={value}".encode(), []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "environ").read_bytes():
                left.append((proc.name, (proc / "cmdline").read_bytes()))
        except OSError:
            continue
    assert left == []
