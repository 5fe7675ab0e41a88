"""Mechanism: the campaign lock survives whatever happens to its file. A run holds
harness.io.lock.CampaignLock; any sequence of deletions, replacements and rewrites of
`.epcap.lock` (the holder note) leaves a second acquirer refused with BadInput."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.io.lock import LOCK_NAME, CampaignLock


def _delete(path):
    path.unlink(missing_ok=True)


def _replace(path):
    tmp = path.with_name("new.tmp")
    tmp.write_text('{"pid": 1, "host": "h", "since_utc": "x"}\n')
    os.replace(tmp, path)


def _symlink(path):
    path.unlink(missing_ok=True)
    os.symlink(path.with_name("elsewhere"), path)


def _truncate(path):
    if path.exists() and not path.is_symlink():
        path.write_bytes(b"")


def _garbage(path):
    path.unlink(missing_ok=True)
    path.write_bytes(b"\xff" * 10)


OPS = {"delete": _delete, "replace": _replace, "symlink": _symlink, "truncate": _truncate,
       "garbage": _garbage}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=4))
def test_second_acquirer_refused_whatever_happens_to_the_lock_file(tmp_path, ops):
    campaign = Path(tempfile.mkdtemp(dir=tmp_path))
    with CampaignLock(campaign):
        for op in ops:
            OPS[op](campaign / LOCK_NAME)
        with pytest.raises(BadInput, match="in use|deleted or replaced|cannot create the campaign lock"):
            CampaignLock(campaign).acquire()
    for op in ops:                       # released: the directory can be taken again
        OPS[op](campaign / LOCK_NAME)
    if (campaign / LOCK_NAME).is_symlink():      # never followed: the target is not made
        with pytest.raises(BadInput, match="cannot create the campaign lock"):
            CampaignLock(campaign).acquire()
        assert not (campaign / "elsewhere").exists()
    else:
        with CampaignLock(campaign) as lock:
            assert lock.fd is not None


def test_lock_held_by_another_process_survives_deleting_its_file(tmp_path):
    code = ("import sys,time; from harness.io.lock import CampaignLock; "
            "l=CampaignLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stdout.readline().strip() == "held"
        (tmp_path / LOCK_NAME).unlink()
        with pytest.raises(BadInput, match="in use"):
            CampaignLock(tmp_path).acquire()
    finally:
        proc.kill()
        proc.wait()
