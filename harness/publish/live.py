"""Publishing as the campaign goes (`publish: {live: true, repo: ORG/NAME}` in the runbook, or
`epcap run --publish ORG/NAME`): each time a stage's planned runs have all finished, and at the
campaign's end, the finished cells and the tables as they stand are committed to the dataset
repository under one fixed `<campaign>/live-<utc>/` prefix, each commit with `parent_commit`
= the commit this publisher made last (the head read once before its first). The Hub then
keeps every stage as it was first published: `epcap audit hf://...` reads that history
(`history-rewritten`, harness/audit/rules/history.py).

A refused parent (another commit came in between) or any failure stops live publishing with
a message; the campaign itself goes on locally and says so. Its state (repo, prefix, last
commit, what each path was published as) is `.epcap-live.json` in the campaign directory
(hidden: never uploaded), so a resumed campaign publishes on to the same prefix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from harness.audit.rules.signature import file_sha256
from harness.errors import BadInput
from harness.io.atomic import write_text_atomic
from harness.io.redact import redact_text
from harness.io.safeio import read_json as safe_json
from harness.results.layout import CELL_JSON

STATE_FILE = ".epcap-live.json"
RUNNING = "running"


def cell_finished(root: Path, rel: str) -> bool:
    """Whether a path lies outside any cell, or in a cell whose cell.json says it finished
    (the driver writes `running` at launch and the outcome at finish)."""
    parts = rel.split("/")
    if "cells" not in parts[:-1]:
        return True
    cell = root.joinpath(*parts[:parts.index("cells") + 2])
    try:
        doc = safe_json(cell / CELL_JSON)
    except BadInput:
        return False
    return isinstance(doc, dict) and doc.get("status") not in (None, RUNNING)


class LivePublisher:
    """Commits what the campaign has finished, stage by stage, to one dataset repository."""

    def __init__(self, root: Path, repo: str, say: Callable[[str], None] = print) -> None:
        from harness.publish import REPO_ID, campaign_name
        if not REPO_ID.fullmatch(repo or "") or redact_text(repo) != repo:
            raise ValueError(f"expected ORG/NAME, got {redact_text(repo or '')!r}")
        self.root, self.repo, self.say = Path(root), repo, say
        state = self.load()
        if state.get("repo") != repo:
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            state = {"repo": repo, "prefix": f"{campaign_name(self.root)}/live-{stamp}/",
                     "parent": None, "published": {}, "stopped": None}
        self.state = state

    @property
    def prefix(self) -> str:
        return self.state["prefix"]

    @property
    def stopped(self) -> str | None:
        return self.state.get("stopped")

    def load(self) -> dict:
        try:
            doc = safe_json(self.root / STATE_FILE)
        except BadInput:
            return {}
        return doc if isinstance(doc, dict) else {}

    def save(self) -> None:
        write_text_atomic(self.root / STATE_FILE, json.dumps(self.state, indent=1) + "\n")

    def stop(self, why: str) -> None:
        """Stop publishing for good (this campaign directory), saying so once."""
        self.state["stopped"] = why
        self.save()
        self.say(f"live publishing stopped: {why}; the campaign continues locally in "
                 f"{self.root} (publish it at the end with `epcap publish`)")

    def changed(self) -> list[str]:
        """Files to commit now: those `epcap publish` would upload (the evidence list and what
        a reader needs) outside unfinished cells, new or changed since last published."""
        from harness.publish import local_files
        files, _ = local_files(self.root)
        published = self.state["published"]
        return [rel for rel in files if cell_finished(self.root, rel)
                and published.get(rel) != file_sha256(self.root / rel)]

    def publish(self, why: str) -> str | None:
        """One commit of what changed, with the last commit as its parent; the new commit's
        id, or None (nothing new, stopped, or it failed: then stopped, with a message)."""
        if self.stopped:
            return None
        from huggingface_hub import CommitOperationAdd, HfApi  # lazy: only publishing

        from harness.audit.evidence import TRACE_WITHHELD_SUFFIX
        from harness.audit.rules.routing import TRACE_CAP_BYTES
        from harness.publish import (
            files_with_secrets,
            hub,
            hub_reachable,
            moved_on,
            repo_head,
            withheld_traces,
        )
        files = self.changed()
        if not files:
            return None
        hub.use_deadlines()                 # every request: hub.HUB_TIMEOUT_S, never forever
        unreachable = hub_reachable()       # stop now, not after the client's retries
        if unreachable:
            self.stop(f"the hub cannot be reached ({redact_text(unreachable)})")
            return None
        leaks = files_with_secrets(self.root, files)
        if leaks:
            self.stop(f"{redact_text(leaks[0])} holds a secret's value or shape; nothing of "
                      "it was uploaded")
            return None
        withheld = withheld_traces(self.root, files, TRACE_CAP_BYTES)
        ops = [CommitOperationAdd(self.prefix + rel, str(self.root / rel))
               for rel in files if rel not in withheld]
        ops += [CommitOperationAdd(self.prefix + rel + TRACE_WITHHELD_SUFFIX,
                                   f"{digest}  {os.path.basename(rel)}\n".encode())
                for rel, digest in sorted(withheld.items())]
        parent = self.state["parent"]
        try:
            parent = parent or repo_head(self.repo)
            info = HfApi().create_commit(
                repo_id=self.repo, repo_type="dataset", operations=ops, parent_commit=parent,
                commit_message=f"epcap live {self.prefix.rstrip('/')}: {why}")
        except Exception as exc:  # noqa: BLE001 -- every failure stops live publishing
            if parent and moved_on(exc):
                self.stop(f"parent commit mismatch: hf://datasets/{self.repo} is no longer "
                          f"at {parent} (another commit came in between)")
            else:
                why = exc if isinstance(exc, hub.HubUnanswered) else hub.describe(exc)
                self.stop(f"upload failed: {why}")
            return None
        oid = str(getattr(info, "oid", "") or "")
        self.state["parent"] = oid or None
        self.state["published"].update({rel: file_sha256(self.root / rel) for rel in files})
        self.save()
        self.say(f"published {len(files)} files ({why}) to hf://datasets/{self.repo}/"
                 f"{self.prefix} at {oid[:12]}")
        return oid
