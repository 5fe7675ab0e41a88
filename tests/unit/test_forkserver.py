"""harness.launch.forkserver through the local launcher: forked runs, exit codes, logs, kills."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from backends.reference import adapter
from harness.api.backend import LaunchSpec
from harness.launch import forkserver
from harness.launch.local import LocalLauncher

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "forkchild"


def spec(*args: str, prefork: str = "json", ntasks: int = 1) -> LaunchSpec:
    return LaunchSpec(argv=[sys.executable, "-m", "forkchild_main", *args],
                      env={forkserver.PREFORK_ENV: prefork,
                           "PYTHONPATH": str(FIXTURE) + os.pathsep + os.environ.get(
                               "PYTHONPATH", "")},
                      ntasks=ntasks, nodes=1, gpus_per_node=0, cwd=str(FIXTURE))


def wait(launcher, handle, limit=30.0):
    deadline = time.monotonic() + limit
    while (res := launcher.poll(handle)) is None:
        assert time.monotonic() < deadline, "run did not finish"
        time.sleep(0.02)
    return res


def test_forked_runs_log_and_exit_codes(tmp_path):
    launcher = LocalLauncher()
    ok = launcher.submit("ok", spec("0", ntasks=2), tmp_path / "ok", 30)
    bad = launcher.submit("bad", spec("3"), tmp_path / "bad", 30)
    r_ok, r_bad = wait(launcher, ok), wait(launcher, bad)
    assert (r_ok.state, r_ok.exit_code) == ("completed", 0)
    assert (r_bad.state, r_bad.exit_code) == ("failed", 3)
    log1 = (tmp_path / "ok" / "rank1.log").read_text()
    assert "argv=['0'] rank=1" in log1 and "to-stderr" in log1 and f"cwd={FIXTURE}" in log1
    assert len(launcher._servers) == 1                    # one server, reused
    server = next(iter(launcher._servers.values()))
    assert ok.extra["pids"][0] != server.proc.pid         # a new process per run


def test_forked_run_is_killed_on_timeout_and_server_cleans_up_on_eof(tmp_path):
    launcher = LocalLauncher()
    h = launcher.submit("slow", spec("0", "60"), tmp_path / "slow", 0.5)
    res = wait(launcher, h)
    assert res.state == "timeout"
    server = next(iter(launcher._servers.values()))
    h2 = launcher.submit("slow2", spec("0", "60"), tmp_path / "slow2", 30)
    pid = h2.extra["pids"][0]
    server.close()                                         # EOF: the server kills its runs
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("forked run survived its server")


def test_only_python_dash_m_runs_are_forked():
    env = {forkserver.PREFORK_ENV: "torch"}
    assert forkserver.uses_forkserver([sys.executable, "-m", "x"], env) == ["torch"]
    assert forkserver.uses_forkserver(["torchrun", "-m", "x"], env) == []
    assert forkserver.uses_forkserver([sys.executable, "-m", "x"], {}) == []
    assert adapter.PREFORK_ENV == forkserver.PREFORK_ENV


def test_warm_starts_each_server_once_and_the_run_forks_from_it(tmp_path):
    launcher = LocalLauncher()
    plain = LaunchSpec(argv=[sys.executable, "-c", "pass"], env={}, ntasks=1, nodes=1,
                       gpus_per_node=0, cwd=str(tmp_path))
    launcher.warm([plain])
    assert launcher._servers == {}                        # nothing forks from a server
    launcher.warm([spec("0"), spec("0", ntasks=2), spec("0", prefork="json,csv"), plain])
    assert sorted(launcher._servers) == [("json",), ("json", "csv")]
    warmed = launcher._servers[("json",)]
    h = launcher.submit("ok", spec("0"), tmp_path / "ok", 30)
    assert wait(launcher, h).exit_code == 0
    assert launcher._servers[("json",)] is warmed         # the run used the warmed server
    for server in launcher._servers.values():
        server.close()
