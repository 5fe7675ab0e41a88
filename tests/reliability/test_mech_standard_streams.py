"""Mechanism: the standard streams rule (harness/io/boundary/streams.py) holds for what click
prints itself, `--version` and every `--help` (the bare `epcap` too), as for every command:
stdout on a full device is `stdout: cannot write this command's output (No space left on
device)`, exit 2, and no harness-failure file; stdout closed (`>&-`) is `stdout: is closed`,
exit 2.

Seen failing on the code before (28ad19d): `epcap --version > /dev/full` said `harness
failure (a bug or a broken environment ...): OSError: [Errno 28] ... (utils.py:333 in echo)`
and wrote a new epcap-error-*.txt each time; `epcap --version >&-` exited 0, silently.
/dev/full is only ever the child's stdout here (opened after checking it is the character
device), never a path given to epcap."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.cli import main

from .conftest import HERE

REPO = HERE.parents[1]
EAGER = st.one_of(st.just(["--version"]), st.just(["--help"]), st.just([]),
                  st.sampled_from(sorted(main.commands)).map(lambda c: [c, "--help"]))


def full_device_ok() -> bool:
    try:
        return stat.S_ISCHR(os.stat("/dev/full").st_mode)
    except OSError:
        return False


def epcap(argv: list[str], tmp: str, **kwargs) -> subprocess.CompletedProcess:
    """`python -m harness.cli ARGV` in a child whose temporary folder is `tmp`."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], stderr=subprocess.PIPE,
                          text=True, timeout=60, cwd=tmp,
                          env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": tmp}, **kwargs)


@pytest.mark.skipif(not full_device_ok(), reason="/dev/full is not the character device")
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=EAGER)
@example(argv=["--version"])            # the probe
@example(argv=["run", "--help"])
def test_eager_output_to_a_full_device_is_named_stdout(tmp_path_factory, argv):
    tmp = tmp_path_factory.mktemp("t")
    with open("/dev/full", "w") as full:            # the child's stdout only
        done = epcap(argv, str(tmp), stdout=full)
    assert done.returncode == 2, (argv, done.stderr)
    assert done.stderr.startswith("epcap: error: stdout: cannot write this command's output "
                                  "(No space left on device)"), (argv, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "harness failure" not in done.stderr and "Exception ignored" not in done.stderr
    assert list(tmp.iterdir()) == [], "a harness-failure file was written"


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=EAGER)
@example(argv=["--version"])            # the probe
def test_eager_output_to_a_closed_stdout_is_named(tmp_path_factory, argv):
    tmp = tmp_path_factory.mktemp("t")
    done = epcap(argv, str(tmp), preexec_fn=lambda: os.close(1))     # `>&-`
    assert done.returncode == 2, (argv, done.stderr)
    assert done.stderr.startswith("epcap: error: stdout: is closed"), (argv, done.stderr)
    assert "Traceback" not in done.stderr


def test_a_usage_error_still_wins_over_a_closed_stdout(tmp_path):
    done = epcap(["--no-such-option"], str(tmp_path), preexec_fn=lambda: os.close(1))
    assert done.returncode == 2 and "no such option" in done.stderr.lower(), done.stderr


def test_version_still_prints(tmp_path):
    done = epcap(["--version"], str(tmp_path), stdout=subprocess.PIPE)
    assert done.returncode == 0 and done.stdout.strip() and not done.stderr, done
