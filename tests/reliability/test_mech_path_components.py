"""Mechanism: every name that becomes a path component (campaign, model, backend, cell part)
passes one validator, harness.io.bounds.path_component_problem, called by the runbook loader
(file:line: field, exit 2) before any directory is written, and again by layout.Cell."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.runbook.load import load_runbook

from .conftest import FIXTURES, TOKEN, assert_bad_input, run_cli

# the input family: short strings over an alphabet rich in separators, dots, controls and
# non-ASCII, plus the token shapes the redaction pass hides and over-long names
PIECES = st.sampled_from(["/", "\\", "..", ".", "__", "\x00", "\n", "\t", " ", "é", "\u202e",
                          "-", "_", "+", "~", "a", "Z", "9", "hf_", "ghp_", "AKIA", "=", "~", "$"])
NAMES = st.one_of(
    st.lists(PIECES, min_size=0, max_size=8).map("".join),
    st.text(max_size=12),
    st.builds(lambda n: "m" * n, st.integers(90, 400)),
    st.sampled_from([TOKEN, "ghp_" + "A" * 30, "AKIA" + "B" * 16, "API_KEY=abcdefgh12",
                     "--api-key=abcdefgh", "../../etc", "a/../../b", "..", "."]),
)
SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,99}")


def is_one_child(name: str, root: Path) -> bool:
    """The property the validator must give: root/name is a direct child of root."""
    return (os.sep not in name and "\x00" not in name and name not in (".", "..")
            and (root / name).resolve().parent == root.resolve())


@settings(max_examples=200, deadline=None)
@given(NAMES)
@example("../evil")
@example(TOKEN)
def test_validator_accepts_only_single_plain_components(name):
    from harness.io.bounds import path_component_problem
    from harness.io.redact import redact_text
    why = path_component_problem(name, "model")
    if why is None:
        assert SAFE.fullmatch(name) and "__" not in name and not name.endswith("_"), name
        assert is_one_child(name, Path("/tmp/epcap-root"))
        assert redact_text(name) == name, "an accepted identity would be redacted"
    else:
        assert "\n" not in why and len(why) < 400, "the reason is one bounded line"


def _book(tmp: Path, model: str = "QWEN3_30B", backend: str = "echo") -> Path:
    book = tmp / "book"
    shutil.rmtree(book, ignore_errors=True)
    book.mkdir(parents=True)
    zoo = (FIXTURES / "models.yaml").read_text().replace("  QWEN3_30B:",
                                                         f"  {json.dumps(model)}:")
    (book / "models.yaml").write_text(zoo)
    text = (FIXTURES / "tiny.yaml").read_text()
    text = text.replace("{name: QWEN3_30B,", f"{{name: {json.dumps(model)},")
    text = text.replace("{name: echo, kind", f"{{name: {json.dumps(backend)}, kind")
    (book / "tiny.yaml").write_text(text)
    return book / "tiny.yaml"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAMES, role=st.sampled_from(["model", "backend"]))
@example(name="../evil", role="model")
@example(name="../evil", role="backend")
@example(name=TOKEN, role="model")
def test_loader_refuses_unsafe_model_and_backend_names(tmp_path, name, role):
    book = _book(tmp_path, **{role: name})
    from harness.io.bounds import path_component_problem
    try:
        rb = load_runbook(book)
    except BadInput as exc:
        assert "tiny.yaml" in str(exc) or "models.yaml" in str(exc), str(exc)
        return
    names = [m.name for m in rb.models] if role == "model" else [b.name for b in rb.backends]
    assert path_component_problem(name, role) is None and name in names, name


@pytest.mark.parametrize("role", ["model", "backend"])
def test_run_with_dotdot_name_exits_2_and_writes_nothing(tmp_path, role):
    book = _book(tmp_path, **{role: "../escaped"})
    results = tmp_path / "deep" / "results"
    res = run_cli("run", book, "--results", results, timeout_s=20)
    assert_bad_input(res, "tiny.yaml:", "name")
    assert not (tmp_path / "deep").exists()
    assert not list(tmp_path.rglob("escaped*"))


@settings(max_examples=200, deadline=None)
@given(model=NAMES, backend=NAMES)
@example(model="a_", backend="b")
def test_cell_refuses_names_that_escape_its_directory(model, backend):
    from harness.results.layout import Cell, cell_dir, parse_cell_name
    root = Path("/tmp/epcap-root/campaign")
    try:
        cell = Cell("c", model, backend, "measure", "2.00")
    except BadInput:
        return
    path = cell_dir(root, cell)
    assert path.resolve().parent == (root / "cells").resolve(), path
    assert parse_cell_name(cell.name, "c") == cell
