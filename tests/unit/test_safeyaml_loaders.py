"""libyaml (CSafeLoader) and the pure-Python SafeLoader read every YAML document alike.

harness/io/safeyaml.py composes with libyaml when PyYAML has it (about 10x faster: the
signature table is read by every `epcap` process) and falls back to the pure-Python loader
for whatever libyaml refuses. These tests hold the two readings equal: every YAML file in the
repository and generated documents give the same values and the same line for every node.
Seen red: with libyaml's refusals raised as they are (the lone-surrogate and deep-nesting
cases of the last test differ from the Python loader's reading).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.io import safeyaml
from harness.io.yamldoc import Doc

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(p for pat in ("*.yaml", "*.yml") for p in ROOT.glob(f"**/{pat}")
               if ".venv" not in p.parts and "mutants" not in p.parts and ".git" not in p.parts)

pytestmark = pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML without libyaml")


def both(text: str, monkeypatch) -> tuple:
    """(data, lines) read with libyaml and with the pure-Python loader."""
    out = []
    for loader in (yaml.CSafeLoader, yaml.SafeLoader):
        monkeypatch.setattr(safeyaml, "LOADER", loader)
        doc = Doc(Path("x.yaml"), text)
        out.append((doc.data, doc.lines, doc.raw))
    return tuple(out)


def test_the_fast_loader_is_libyaml():
    assert safeyaml.LOADER is yaml.CSafeLoader


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_every_yaml_file_of_the_repository_reads_alike(path, monkeypatch):
    text = path.read_text(encoding="utf-8", errors="replace")
    results = []
    for loader in (yaml.CSafeLoader, yaml.SafeLoader):
        monkeypatch.setattr(safeyaml, "LOADER", loader)
        try:
            doc = Doc(path, text)
            results.append(("ok", doc.data, doc.lines))
        except Exception as exc:  # noqa: BLE001 -- the same refusal either way is the point
            results.append(("refused", type(exc).__name__, str(exc)))
    assert results[0] == results[1]


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=False, allow_infinity=False, width=32),
                    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12))
trees = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4),
    st.dictionaries(st.text("abcdefgh_", min_size=1, max_size=6), kids, max_size=4)),
    max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(tree=st.dictionaries(st.text("abcxyz", min_size=1, max_size=5), trees, max_size=5),
       flow=st.booleans())
def test_generated_documents_read_alike(tree, flow):
    text = yaml.safe_dump(tree, default_flow_style=flow, allow_unicode=True)
    with pytest.MonkeyPatch.context() as mp:
        (c_data, c_lines, c_raw), (p_data, p_lines, p_raw) = both(text, mp)
    assert c_data == p_data == tree and c_lines == p_lines and c_raw == p_raw


@pytest.mark.parametrize("text", ['a: "\\ud800"\n', "a: [" * 70 + "]" * 70 + "\n",
                                  "a: [" * 5000 + "]" * 5000 + "\n", "a: b: c\n", "\t- x\n"])
def test_what_libyaml_refuses_is_said_as_the_python_loader_says_it(text, monkeypatch):
    outcomes = []
    for loader in (yaml.CSafeLoader, yaml.SafeLoader):
        monkeypatch.setattr(safeyaml, "LOADER", loader)
        try:
            outcomes.append(("ok", Doc(Path("x.yaml"), text).data))
        except Exception as exc:  # noqa: BLE001
            outcomes.append(("refused", str(exc)))
    assert outcomes[0] == outcomes[1]
