"""The results root (harness/io/boundary/campaigns.py): campaign directories are recognised by
the record epcap wrote in them, never by parsing a directory name. Each case failed before:
`tiny-²` crashed the name parser (int('²')), a backup `tiny-20261201` was resumed instead of
`tiny`, `--results` at a finished campaign nested a new one inside it, and one damaged event
in a neighbour campaign stopped a new one (float('soon'))."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.io.boundary.campaigns import MARKER

from .conftest import assert_bad_input, run_cli


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
