"""A backend option that names a path (`PATH_FIELDS`: the reference backend's `trace`,
`record_trace`) is refused at load when something other than a regular file or a directory
is there (a FIFO, a socket, a device, a link to one): exit 2 at its line, naming the field,
before any directory is created (harness/io/boundary/paths.py `special_file_problem`).

Seen failing on 28ad19d: `options: {trace: FIFO}` passed load and --dry-run; the real run's
canary failed twice as `unclassified` (node0.log: `trace ...: must be a regular file, got a
FIFO`) and the campaign stopped with exit 3, "nothing known says why it failed". Every
special kind the generator drew here loaded."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.runbook.load import load_runbook

from .conftest import FIXTURES, assert_bad_input, run_cli

BACKEND = "options: {launch: single}"
SPECIAL = ("fifo", "socket", "chardev", "link-to-fifo", "link-to-chardev", "link-to-link-to-fifo")
PLAIN = ("file", "directory", "missing", "dangling-link")


def make(folder: Path, kind: str) -> Path:
    """A path under `folder` holding `kind` (devices made with mknod here, never /dev's)."""
    path = folder / f"thing-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "chardev":
        os.mknod(path, 0o600 | 0o020000, os.makedev(1, 3))
    elif kind.startswith("link-to-"):
        os.symlink(make(folder, kind.removeprefix("link-to-")), path)
    elif kind == "file":
        path.write_text("")
    elif kind == "directory":
        path.mkdir()
    elif kind == "dangling-link":
        os.symlink(folder / "nowhere", path)
    return path


def book(tmp_path: Path, field: str, value: str) -> Path:
    """The tiny runbook with `options.<field>: value` on its backend, in a fresh folder."""
    folder = tmp_path / "book"
    folder.mkdir(exist_ok=True)
    (folder / "models.yaml").write_bytes((FIXTURES / "models.yaml").read_bytes())
    text = (FIXTURES / "tiny.yaml").read_text()
    (folder / "tiny.yaml").write_text(text.replace(
        BACKEND, f'options: {{launch: single, {field}: "{value}"}}'))
    return folder / "tiny.yaml"


def special_kinds_possible() -> bool:
    return hasattr(os, "mkfifo") and os.geteuid() == 0     # mknod of a device needs root


@pytest.mark.skipif(not special_kinds_possible(), reason="needs mkfifo and (root) mknod")
@settings(max_examples=60, deadline=5000,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(("trace", "record_trace")), kind=st.sampled_from(SPECIAL),
       relative=st.booleans())
@example(field="trace", kind="fifo", relative=False)
def test_a_special_file_at_a_path_option_is_refused_at_its_line(tmp_path_factory, field,
                                                                 kind, relative):
    tmp = tmp_path_factory.mktemp("opt")
    target = make(tmp, kind)
    path = book(tmp, field, target.name if relative else str(target))
    if relative:
        os.rename(target, path.parent / target.name)
    with pytest.raises(BadInput) as info:
        load_runbook(path)
    exc = info.value
    assert exc.field == f"backends[0].options.{field}", str(exc)
    assert exc.path == str(path) and exc.line == 8, str(exc)
    assert "regular file or a directory" in str(exc), str(exc)


@pytest.mark.parametrize("kind", PLAIN)
@pytest.mark.parametrize("field", ["trace", "record_trace"])
def test_a_file_a_directory_or_nothing_yet_is_accepted(tmp_path, field, kind):
    target = make(tmp_path, kind)
    load_runbook(book(tmp_path, field, str(target)))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")
def test_the_probe_is_exit_2_before_any_directory(tmp_path):
    fifo = make(tmp_path, "fifo")
    path = book(tmp_path, "trace", str(fifo))
    for extra in (("--dry-run",), ()):
        res = run_cli("run", path, "--results", tmp_path / "r", *extra, timeout_s=20)
        assert_bad_input(res, f"{path}:8: backends[0].options.trace: must be a regular file "
                         "or a directory", "a FIFO")
    assert not (tmp_path / "r").exists()
