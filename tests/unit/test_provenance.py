"""Provenance: docs/spec.md: provenance fields, honest absent values, git facts, secrets, atomic writes."""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.results import provenance as prov
from harness.results.provenance import (
    REDACTED,
    capture_provenance,
    read_provenance,
    redact_argv,
    repo_line,
    write_provenance,
)

SECRET = "s3cr3t-value-7f1d2a9c-do-not-leak"
SPEC_KEYS = ("harness.version", "harness.commit", "harness.commit_date", "harness.dirty",
             "command_line", "utc_start", "hostnames", "gpu.model", "gpu.count", "gpu.driver",
             "cuda", "nccl", "nvshmem", "torch", "python")


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    path = tmp_path / "run_scripts"
    path.mkdir()
    git(path, "init", "-q", "-b", "trunk")
    (path / "a.sh").write_text("echo\n")
    git(path, "add", "a.sh")
    git(path, "commit", "-q", "-m", "one")
    return path


@pytest.fixture
def fresh_static():
    """Forget the per-process cache around a test that fakes the machine."""
    prov._static_facts.cache_clear()
    yield
    prov._static_facts.cache_clear()


def test_spec_fields_present(repo, tmp_path):
    runbook = tmp_path / "rb.yaml"
    runbook.write_text("campaign: x\n")
    fields = capture_provenance(["epcap", "run", str(runbook)], {"run_scripts": repo}, runbook)
    for key in SPEC_KEYS:
        assert fields.get(key), key
    assert fields["command_line"] == shlex.join(["epcap", "run", str(runbook)])
    sha = git(repo, "rev-parse", "HEAD")
    date = git(repo, "log", "-1", "--format=%cI")
    assert fields["repo.run_scripts"] == f"{sha} {date} trunk dirty=false"
    assert fields["runbook.sha256"] == hashlib.sha256(b"campaign: x\n").hexdigest()


def test_torch_facts_are_honest():
    """On this CPU build: torch's own version, and no CUDA/NCCL invented."""
    import importlib.metadata
    fields = capture_provenance(["x"], {})
    assert fields["torch"] == importlib.metadata.version("torch")
    if "+cpu" in fields["torch"]:
        assert (fields["cuda"], fields["nccl"]) == ("not-installed", "not-installed")


@pytest.mark.parametrize("text, expected", [
    ("__version__ = '2.5.0+cpu'\ncuda: Optional[str] = None\n",
     {"torch": "2.5.0+cpu", "cuda": "not-installed", "nccl": "not-installed"}),
    ("__version__ = '2.5.0'\ncuda: Optional[str] = '12.4'\n", None),   # needs the import
    ("nothing useful\n", None),
])
def test_torch_version_file_without_import(monkeypatch, tmp_path, text, expected):
    (tmp_path / "version.py").write_text(text)
    spec = types.SimpleNamespace(submodule_search_locations=[str(tmp_path)])
    monkeypatch.setattr(prov.importlib.util, "find_spec", lambda name: spec)
    assert prov._torch_facts_unimported() == expected


def test_repo_dirty_branch_missing_and_not_git(repo, tmp_path):
    (repo / "a.sh").write_text("changed\n")
    assert repo_line(repo).endswith(" trunk dirty=true")
    git(repo, "checkout", "-q", "--detach")
    assert " detached dirty=true" in repo_line(repo)
    assert repo_line(tmp_path / "nope") == f"missing {tmp_path / 'nope'}"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert repo_line(plain) == f"not-a-git-checkout {plain}"


def test_no_gpu_when_neither_nvml_nor_smi(monkeypatch, fresh_static):
    monkeypatch.setitem(sys.modules, "pynvml", None)           # import fails
    monkeypatch.setattr(prov.shutil, "which", lambda name: None)
    fields = capture_provenance(["x"], {})
    assert (fields["gpu.model"], fields["gpu.count"], fields["gpu.driver"]) == (
        "no-gpu", "0", "no-gpu")


def test_gpu_from_nvidia_smi(monkeypatch, tmp_path, fresh_static):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA B200, 570.86.15'\necho 'NVIDIA B200, 570.86.15'\n")
    smi.chmod(0o755)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    fields = capture_provenance(["x"], {})
    assert (fields["gpu.model"], fields["gpu.count"], fields["gpu.driver"],
            fields["gpu.source"]) == ("NVIDIA B200", "2", "570.86.15", "nvidia-smi")


def test_gpu_from_nvml(monkeypatch, fresh_static):
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 4,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H200", nvmlSystemGetDriverVersion=lambda: "575.1")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    fields = capture_provenance(["x"], {})
    assert (fields["gpu.model"], fields["gpu.count"], fields["gpu.driver"]) == (
        "NVIDIA H200", "4", "575.1")


def test_nvshmem_from_header(monkeypatch, tmp_path):
    include = tmp_path / "include"
    include.mkdir()
    (include / "nvshmem_version.h").write_text(
        "#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n#define NVSHMEM_VENDOR_MINOR_VERSION 2\n"
        "#define NVSHMEM_VENDOR_PATCH_VERSION 5\n")
    monkeypatch.setattr(prov, "NVSHMEM_PACKAGES", ())
    monkeypatch.setenv("NVSHMEM_HOME", str(tmp_path))
    assert prov._nvshmem_version() == "3.2.5"
    monkeypatch.setattr(prov, "_nvshmem_headers", lambda: [tmp_path / "none.h"])
    assert prov._nvshmem_version() == "not-installed"


def test_secrets_never_written(monkeypatch, repo, tmp_path):
    """A secret-named variable's value appears in no provenance file, whatever the route."""
    monkeypatch.setenv("MY_SERVICE_TOKEN", SECRET)
    monkeypatch.setenv("NCCL_IB_KEY", SECRET + "-2")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    argv = ["epcap", "run", f"--note={SECRET}", "--hf-token", "plain-token-value-123",
            "--api-key=other-secret-abc"]
    fields = capture_provenance(argv, {"run_scripts": repo})
    fields["extra"] = f"leaked {SECRET} here"                 # even a caller's own field
    out = tmp_path / "out"
    write_provenance(out / "provenance.txt", fields)
    write_provenance(out / "cells" / "c" / "provenance.txt", {"cell.argv": " ".join(argv)})
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) == 2
    for path in files:
        assert SECRET not in path.read_text() and "NCCL_IB_KEY" not in path.read_text()
    written = read_provenance(out / "provenance.txt")
    assert "plain-token-value-123" not in written["command_line"]
    assert "other-secret-abc" not in written["command_line"]
    assert written["env.NCCL_DEBUG"] == "INFO" and written["env.OMP_NUM_THREADS"] == "3"
    assert "--hf-token REDACTED" in written["command_line"]
    assert "--api-key=REDACTED" in written["command_line"]


def test_redact_argv_keeps_ordinary_arguments():
    argv = ["--seq", "8192", "--moe-router-topk", "8", "--tokenizer-model", "x"]
    # Option names are judged word by word: "tokenizer" is not the word "token".
    assert redact_argv(argv, []) == argv
    assert redact_argv(["--hf-token", "x", "--auth_token=y"], []) == [
        "--hf-token", REDACTED, f"--auth_token={REDACTED}"]
    assert redact_argv(["a", "--password", "p"], []) == ["a", "--password", REDACTED]


def test_write_is_atomic_and_round_trips(tmp_path):
    path = tmp_path / "provenance.txt"
    write_provenance(path, {"a": "1", "multi": "line one\nline two", "k": "v: with colon"})
    assert read_provenance(path) == {"a": "1", "multi": "line one line two",
                                     "k": "v: with colon"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["provenance.txt"]
    assert path.read_text().splitlines()[0] == "a: 1"


def test_write_failure_leaves_no_partial_file(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(prov.os, "replace", broken)
    with pytest.raises(OSError):
        write_provenance(tmp_path / "provenance.txt", {"a": "1"})
    assert list(tmp_path.iterdir()) == []


def test_capture_reuses_the_process_facts_after_the_first(repo):
    """Every cell captures provenance: the facts fixed for the process (harness commit, GPU,
    libraries) are probed once, not per cell (a count, not a timing: the machine is shared)."""
    capture_provenance(["x"], {"run_scripts": repo})
    before = prov._static_facts.cache_info()
    for _ in range(5):
        capture_provenance(["x"], {"run_scripts": repo})
    after = prov._static_facts.cache_info()
    assert (after.misses, after.hits) == (before.misses, before.hits + 5)


@pytest.mark.parametrize("body", ["", "raise RuntimeError('half-installed')\n"])
def test_a_broken_torch_first_on_pythonpath_is_a_clear_error_not_a_traceback(tmp_path, body):
    """`epcap run` with a stray `torch` package first on PYTHONPATH (one without
    `torch.version`, one that raises on import). Catches the run ending in a raw
    AttributeError/RuntimeError traceback from provenance before any cell exists: it must
    exit 2 naming the file and PYTHONPATH."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(body)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{root}")
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run",
                           str(root / "tests" / "fixtures" / "runbooks" / "reduced.yaml"),
                           "--results", str(tmp_path / "res")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "PYTHONPATH" in proc.stderr, proc.stderr
    assert str(tmp_path / "torch" / "__init__.py") in proc.stderr or "torch:" in proc.stderr
