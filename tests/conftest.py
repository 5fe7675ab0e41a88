"""Shared test setup: keep child processes single-threaded on small CI machines; under
pytest-xdist, keep each module on one worker and the Slurm modules in order on one."""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import docrun
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

# README's first session (the default campaign) is made once a worker: its two users share one.
README_SCOPE = ("tests/e2e/test_default_campaign.py", "tests/unit/test_doc_examples.py")


@functools.cache
def uses_slurm(module: Path) -> bool:
    """A module that marks tests `slurm` puts jobs on the one CI Slurm node."""
    return "pytest.mark.slurm" in module.read_text(encoding="utf-8")


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`make test` runs two xdist workers (`-n 2 --dist loadscope`): most tests are one Python
    process on one core of the two. The scopes are ours: a module's tests stay on one worker
    (its module fixtures made once); the modules that use Slurm form one scope, run in order
    (the node's 16 declared CPUs, and test_slurm.py's failing jobs submitted at the first
    Slurm test); README_SCOPE forms one."""
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
            module = nodeid.split("::", 1)[0]
            if module in README_SCOPE:
                return "readme"
            return "slurm" if uses_slurm(root / module) else module

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
