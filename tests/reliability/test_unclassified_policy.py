"""The campaign's policy for an `unclassified` run (docs/campaign.md#failure-taxonomy-harnesstaxonomyjudgepy):
retried as a new attempt `limits.unclassified.retries` times, then `stop` (exit 3, naming
`epcap classify --explain`) or `continue`; a resume after the stop stops again, and
`--retry unclassified` reruns it. Fake ranks (tests/reliability/fake_rank.py
`--fake-silent-exit`: rows, then exit 1 saying nothing) make the measure cell unclassified."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.results.events import read_events

from .conftest import FakeLauncher, run_cli

MEASURE = "QWEN3_30B__echo__measure__cap2p00__a{}"


class SilentMeasure(FakeLauncher):
    """Fake ranks whose first `silent` measure runs end unclassified."""

    silent = 0

    def submit(self, cell_name, spec, cell_dir, timeout_s):
        if "__measure__" in cell_name and SilentMeasure.silent > 0:
            SilentMeasure.silent -= 1
            spec = dataclasses.replace(spec, argv=[*spec.argv, "--fake-silent-exit"])
        return super().submit(cell_name, spec, cell_dir, timeout_s)


@pytest.fixture
def silent(monkeypatch):
    """`epcap run` in this process with SilentMeasure; returns the class (set `.silent`)."""
    import harness.campaign.cli as campaign_cli
    monkeypatch.setattr(campaign_cli, "make_launcher", lambda name, rb=None: SilentMeasure())
    monkeypatch.setattr(SilentMeasure, "silent", 0)
    return SilentMeasure


def with_policy(book: Path, policy: str | None) -> Path:
    """The tiny runbook with `limits.unclassified` set to `policy` (None: the default)."""
    if policy is not None:
        text = book.read_text().replace("infra_retries: 1}", f"infra_retries: 1, "
                                        f"unclassified: {policy}}}")
        assert policy in text
        book.write_text(text)
    return book


def finished(root: Path) -> dict[str, str]:
    return {e["cell"]: e["status"] for e in read_events(root / "events.jsonl")
            if e["ev"] == "cell_finish"}


def status_json(root: Path) -> dict:
    res = run_cli("status", root, "--json")
    assert res.code == 0, res.text
    return json.loads(res.out)


def test_unclassified_once_is_retried_and_the_campaign_goes_on(tiny, tmp_path, silent):
    silent.silent = 1
    res = run_cli("run", with_policy(tiny, None), "--results", tmp_path / "r", timeout_s=90)
    root = tmp_path / "r" / "tiny"
    assert res.code == 0, res.text
    done = finished(root)
    assert done[MEASURE.format(1)] == "unclassified" and done[MEASURE.format(2)] == "ok"
    assert not (root / "STOPPED.txt").exists()
    doc = status_json(root)
    # the retried unclassified run no longer stands (issue 41): status counts none
    assert doc["state"] == "done" and doc["failures"] == {}
    assert doc["runs_done"] == len(done) - 1          # the retried run is not a result


def test_unclassified_twice_stops_for_a_person_and_resumes_sanely(tiny, tmp_path, silent):
    silent.silent = 2
    run = ("run", with_policy(tiny, None), "--results", tmp_path / "r")
    res = run_cli(*run, timeout_s=90)
    root = tmp_path / "r" / "tiny"
    cell = root / "cells" / MEASURE.format(2)
    assert res.code == 3, res.text
    assert f"`epcap classify --explain {cell}`" in res.err
    assert "--retry unclassified" in res.err
    assert f"`epcap classify --explain {cell}`" in (root / "STOPPED.txt").read_text()
    stop = [e for e in read_events(root / "events.jsonl") if e["ev"] == "campaign_stopped"]
    assert [(e["cell"], e["status"], e["hint"]) for e in stop] == [
        (MEASURE.format(2), "unclassified", f"epcap classify --explain {cell}")]
    assert finished(root) == {"QWEN3_30B__echo__canary__cap2p00__a1": "ok",
                              MEASURE.format(1): "unclassified",
                              MEASURE.format(2): "unclassified"}
    status = run_cli("status", root)
    assert f"run `epcap classify --explain {cell}`" in status.out, status.out

    again = run_cli(*run, timeout_s=90)                # a plain resume: the same stop, no run
    assert again.code == 3 and "classify --explain" in again.err, again.text
    assert len(finished(root)) == 3

    retry = run_cli(*run, "--retry", "unclassified", timeout_s=90)
    assert retry.code == 0, retry.text
    assert finished(root)[MEASURE.format(3)] == "ok"
    assert status_json(root)["state"] == "done"


def test_continue_records_it_and_goes_on(tiny, tmp_path, silent):
    silent.silent = 2
    res = run_cli("run", with_policy(tiny, "{retries: 1, then: continue}"), "--results",
                  tmp_path / "r", timeout_s=90)
    root = tmp_path / "r" / "tiny"
    assert res.code == 1, res.text                      # a failed cell, no stop
    assert f"{MEASURE.format(2)} (unclassified)" in res.out
    assert not (root / "STOPPED.txt").exists()
    assert status_json(root)["state"] == "done"


def test_no_retries_stops_at_the_first(tiny, tmp_path, silent):
    silent.silent = 1
    res = run_cli("run", with_policy(tiny, "{retries: 0}"), "--results", tmp_path / "r",
                  timeout_s=90)
    assert res.code == 3, res.text
    assert MEASURE.format(1) in res.err and MEASURE.format(2) not in res.err


@pytest.mark.parametrize("policy, field", [
    ("{retries: 11}", "limits.unclassified.retries"),
    ("{retries: -1}", "limits.unclassified.retries"),
    ("{retries: yes}", "limits.unclassified.retries"),
    ("{then: guess}", "limits.unclassified.then"),
    ("{retry: 1}", "limits.unclassified.retry"),
    ("stop", "limits.unclassified"),
])
def test_a_bad_policy_is_bad_input_naming_file_and_field(tiny, tmp_path, policy, field):
    res = run_cli("run", with_policy(tiny, policy), "--results", tmp_path / "r")
    assert res.code == 2, res.text
    assert str(tiny) in res.err and field in res.err, res.err
    assert not (tmp_path / "r").exists()
