"""Shared test setup: keep child processes single-threaded on small CI machines."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import docrun
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def readme_first_session(tmp_path_factory):
    """README's first session run once, as written, in a fresh sandbox: (its example, the
    finished bash, the sandbox). The doc test checks it; the default-campaign tests read the
    campaign it ran (results/local-cpu), so the suite runs the default campaign once."""
    example = docrun.first_session()
    box = docrun.sandbox(tmp_path_factory.mktemp("readme"))
    return example, docrun.run_shell(example[3], box), box


_HUBSERVER = importlib.util.spec_from_file_location(
    "hubserver", Path(__file__).resolve().parent / "fixtures" / "hubserver.py")
hubserver = importlib.util.module_from_spec(_HUBSERVER)
_HUBSERVER.loader.exec_module(hubserver)


@pytest.fixture
def local_hub(monkeypatch, tmp_path):
    """tests/fixtures/hubserver.py on 127.0.0.1, the real huggingface_hub pointed at it."""
    from huggingface_hub import constants
    hub = hubserver.Hub()
    monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        hub.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setenv("EPCAP_CACHE", str(tmp_path / "epcap-cache"))
    yield hub
    hub.close()
