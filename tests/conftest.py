"""Shared test setup: keep child processes single-threaded on small CI machines; under
pytest-xdist, keep each module on one worker and the Slurm modules in order on one."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import docrun
import pytest
import scopes

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`make test` runs two xdist workers (`-n 2 --dist loadscope`): most tests are one Python
    process on one core of the two. The scopes are ours (tests/scopes.py): a module's tests
    stay on one worker, every module that uses Slurm is one scope run in order, README's first
    session is one."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling
    root = config.rootpath
    # scopes start in collection order, the end-to-end ones first: the Slurm scope (about 5
    # minutes in order) starts at once, not last (xdist's reorder puts the scopes with the
    # most tests first; measured: the Slurm scope then ran alone at the end)
    config.option.loadscopereorder = False

    class ModuleScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scopes.scope_of(nodeid, root)

    return ModuleScopes(config, log)


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
