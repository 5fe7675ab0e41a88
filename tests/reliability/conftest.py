"""Shared pieces of the reliability suite (issue 17): in-process CLI calls, a fast fake
rank in place of the reference backend, the tiny campaign, and the leak checks."""

from __future__ import annotations

import dataclasses
import shutil
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.launch.local import LocalLauncher

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
FAKE_RANK = HERE / "fake_rank.py"
TOKEN = "hf_ReliabilitySuiteToken0123456789abcd"      # token shape: redact.TOKEN_PATTERN
ENV_SECRET = "envSecretValue-4242-never-printed"      # value of a secret-named variable


class FakeLauncher(LocalLauncher):
    """The local launcher, running tests/reliability/fake_rank.py instead of the reference
    worker (same flags and log format, no torch)."""

    def submit(self, cell_name, spec, cell_dir, timeout_s):
        argv = list(spec.argv)
        if argv[1:3] == ["-m", "backends.reference"]:
            argv = [sys.executable, str(FAKE_RANK), *argv[3:]]
        # the fake writes every rank's lines itself, as one process: one log, no rank FIFOs
        return super().submit(cell_name, dataclasses.replace(spec, argv=argv,
                                                             ranks_per_task=1), cell_dir,
                              timeout_s)


@dataclasses.dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def text(self) -> str:
        return self.out + self.err


def run_cli(*argv: str, timeout_s: float = 60.0) -> Result:
    """`epcap ARGV` in this process (click's runner); the exit code and both streams."""
    t0 = time.monotonic()
    res = CliRunner().invoke(main, [str(a) for a in argv], catch_exceptions=True)
    seconds = time.monotonic() - t0
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        import traceback
        raise AssertionError("traceback instead of an exit code:\n" + "".join(
            traceback.format_exception(res.exception)))
    assert seconds < timeout_s, f"took {seconds:.1f} s (limit {timeout_s} s)"
    return Result(res.exit_code, res.stdout, res.stderr, seconds)


def assert_bad_input(res: Result, *needles: str) -> None:
    """Exit 2 with one `epcap: error:` line holding every needle, and no traceback."""
    assert res.code == 2, (res.code, res.text)
    assert "Traceback" not in res.text
    assert res.err.startswith("epcap: error: "), res.text
    for needle in needles:
        assert needle in res.err, (needle, res.err)


@pytest.fixture
def fake_launcher(monkeypatch):
    """`epcap run` in this process launches fake ranks."""
    import harness.campaign.cli as campaign_cli
    monkeypatch.setattr(campaign_cli, "make_launcher", lambda name, rb=None: FakeLauncher())
    return FakeLauncher


@pytest.fixture
def tiny(tmp_path) -> Path:
    """A copy of the tiny runbook and its models file; returns the runbook's path."""
    book = tmp_path / "book"
    book.mkdir()
    shutil.copy(FIXTURES / "tiny.yaml", book / "tiny.yaml")
    shutil.copy(FIXTURES / "models.yaml", book / "models.yaml")
    return book / "tiny.yaml"


def finished_tiny(base: Path) -> tuple[Path, Path]:
    """(runbook, campaign directory) of the tiny campaign run to its end under `base` with
    fake ranks (the in-process CLI, make_launcher patched for the call only)."""
    import harness.campaign.cli as campaign_cli
    shutil.copy(FIXTURES / "tiny.yaml", base / "tiny.yaml")
    shutil.copy(FIXTURES / "models.yaml", base / "models.yaml")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(campaign_cli, "make_launcher", lambda name, rb=None: FakeLauncher())
        res = run_cli("run", base / "tiny.yaml", "--results", base / "res", timeout_s=120)
    assert res.code == 0, res.text
    return base / "tiny.yaml", base / "res" / "tiny"


def valid_upload(folder: Path) -> Path:
    """The upload corpus's VALID campaign (tests/fixtures/uploads/corpus.py) under `folder`."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "upload_corpus", HERE.parent / "fixtures" / "uploads" / "corpus.py")
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    return corpus.write_valid(folder)


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def assert_no_secret(root: Path, texts: list[str], secrets: list[str]) -> None:
    """No secret in any file name or content under root, nor in any printed text."""
    for path in files_under(root):
        data = path.read_bytes()
        for secret in secrets:
            assert secret not in str(path.relative_to(root)), path
            assert secret.encode() not in data, (path, secret)
    for text in texts:
        for secret in secrets:
            assert secret not in text, secret
