"""The results root (harness/io/boundary/campaigns.py): campaign directories are recognised by
the record epcap wrote in them, never by parsing a directory name. Each case failed before:
`tiny-²` crashed the name parser (int('²')), a backup `tiny-20261201` was resumed instead of
`tiny`, `--results` at a finished campaign nested a new one inside it, and one damaged event
in a neighbour campaign stopped a new one (float('soon'))."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.io.boundary.campaigns import MARKER

from .conftest import assert_bad_input, finished_tiny, run_cli

HEALTH = [HealthCheck.function_scoped_fixture]


@pytest.fixture(scope="module")
def done_tiny(tmp_path_factory) -> tuple[Path, Path]:
    """(runbook, a finished tiny campaign directory), made once with fake ranks."""
    return finished_tiny(tmp_path_factory.mktemp("done"))


def run(book: Path, results: Path, *extra: str):
    return run_cli("run", book, "--results", results, *extra, timeout_s=90)


def test_a_stray_directory_with_a_digit_like_suffix_is_ignored(tiny, tmp_path, fake_launcher):
    results = tmp_path / "r"
    (results / "tiny-²").mkdir(parents=True)
    (results / "tiny-99999999999999999999999999999999").mkdir()
    (results / "notes.txt").write_text("x")
    assert run(tiny, results, "--dry-run").code == 0
    res = run(tiny, results, "--until", "measure")
    assert res.code == 0, res.text
    assert (results / "tiny" / MARKER).is_file()
    status = run_cli("status", results)
    assert status.code == 0, status.text
    assert "tiny-\\xb2" in status.out and "notes.txt" in status.out and "ignored" in status.out
    doc = json.loads(run_cli("status", results, "--json").out)
    assert [c["campaign"] for c in doc["campaigns"]] == ["tiny"]
    assert set(doc["ignored"]) == {"tiny-²", "tiny-99999999999999999999999999999999",
                                   "notes.txt", "tiny.dry-run"}     # a plan, not a campaign


def test_a_backup_copy_is_not_resumed_instead_of_the_campaign(tiny, tmp_path, fake_launcher):
    results = tmp_path / "r"
    assert run(tiny, results, "--until", "measure").code == 0
    shutil.copytree(results / "tiny", results / "tiny-20261201")
    before = sorted(p.name for p in (results / "tiny-20261201").rglob("*"))
    res = run(tiny, results)
    assert res.code == 0, res.text
    assert f"in {results / 'tiny'}" in res.out, res.out
    assert sorted(p.name for p in (results / "tiny-20261201").rglob("*")) == before
    doc = json.loads(run_cli("status", results, "--json").out)
    assert doc["ignored"] == ["tiny-20261201"]


def test_fresh_campaigns_are_numbered_and_the_newest_resumed(tiny, tmp_path, fake_launcher):
    results = tmp_path / "r"
    assert run(tiny, results, "--until", "measure").code == 0
    assert run(tiny, results, "--fresh", "--until", "measure").code == 0
    marker = json.loads((results / "tiny-2" / MARKER).read_text())
    assert marker == {"campaign": "tiny", "dir": "tiny-2", "seq": 2}
    res = run(tiny, results, "--until", "measure")
    assert f"in {results / 'tiny-2'}" in res.out, res.out


def test_results_at_a_finished_campaign_nests_nothing(tiny, tmp_path, fake_launcher):
    results = tmp_path / "r"
    assert run(tiny, results).code == 0
    other = tiny.with_name("other.yaml")
    other.write_text(tiny.read_text().replace("campaign: tiny", "campaign: other"))
    res = run(other, results / "tiny")
    assert_bad_input(res, "--results: is the directory of campaign 'tiny'", "give its parent")
    assert not (results / "tiny" / "other").exists()
    same = run(tiny, results / "tiny")           # the same campaign: it is that campaign's
    assert same.code == 0 and "nothing to run" in same.out, same.text
    assert not (results / "tiny" / "tiny").exists()


def test_a_damaged_neighbour_does_not_stop_a_new_campaign(tiny, tmp_path, fake_launcher):
    results = tmp_path / "r"
    assert run(tiny, results).code == 0
    shutil.copytree(results / "tiny", results / "other")
    (results / "other" / MARKER).unlink()
    log = results / "other" / "events.jsonl"
    lines = []
    for raw in log.read_bytes().splitlines():
        record = json.loads(raw)
        if record["ev"] == "cell_finish":
            record["span_s"] = "soon"
        lines.append(json.dumps(record).encode())
    log.write_bytes(b"\n".join(lines) + b"\n")
    (results / "dangling").symlink_to(tmp_path / "nowhere")
    res = run(tiny, results, "--fresh", "--until", "measure")
    assert res.code == 0, res.text
    assert (results / "tiny-2" / "events.jsonl").is_file()


INSIDE = ["cells", "report", "cells/{cell}", "cells/{cell}/deeper/new", "report/x",
          "new-folder", "via-link", "via-link/new"]


@settings(max_examples=10, deadline=None, suppress_health_check=HEALTH)
@given(where=st.sampled_from(INSIDE), dry=st.booleans())
def test_results_inside_a_recorded_campaign_is_refused(done_tiny, tmp_path, fake_launcher,
                                                       where, dry):
    """`--results` anywhere inside a recorded campaign directory (its cells, a cell, its
    report, a new folder in it, a link outside that points into it) is refused, exit 2, and
    nothing is created there. Seen failing on 28ad19d (rounds23 B4): `run other.yaml
    --results <done>/cells --dry-run` rc 0, writing `<done>/cells/other.dry-run/`, and the
    done campaign's audit turned from VALID to UNKNOWN."""
    book, done = done_tiny
    case = Path(tempfile.mkdtemp(dir=tmp_path))
    camp = case / "tiny"
    shutil.copytree(done, camp)
    (case / "via-link").symlink_to(camp / "cells")
    cell = next(p.name for p in (camp / "cells").iterdir())
    other = case / "other.yaml"
    other.write_text(book.read_text().replace("campaign: tiny", "campaign: other"))
    (case / "models.yaml").write_bytes((book.parent / "models.yaml").read_bytes())
    before = sorted(str(p.relative_to(camp)) for p in camp.rglob("*"))
    target = (case / where.format(cell=cell)) if where.startswith("via-link") else \
        camp / where.format(cell=cell)
    res = run(other, target, *(["--dry-run"] if dry else ["--until", "preflight"]))
    assert_bad_input(res, "--results", "is inside the directory of campaign 'tiny'")
    assert sorted(str(p.relative_to(camp)) for p in camp.rglob("*")) == before


def test_the_exact_probe_b4(done_tiny, tmp_path):
    """rounds23 B4 as written: --results <done>/cells --dry-run."""
    book, done = done_tiny
    shutil.copytree(done, tmp_path / "tiny")
    other = book.with_name("other.yaml")
    other.write_text(book.read_text().replace("campaign: tiny", "campaign: other"))
    res = run(other, tmp_path / "tiny" / "cells", "--dry-run")
    assert_bad_input(res, "--results", str(tmp_path / "tiny"))
    assert not (tmp_path / "tiny" / "cells" / "other.dry-run").exists()
