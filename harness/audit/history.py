"""The commit history of a dataset repository, read for `epcap audit hf://...` (rule
`history-rewritten`, harness/audit/rules/history.py): what each commit held under an upload's
prefix, so that a cell, launch or row replaced or removed after it was first published shows.

Through huggingface_hub 2.4.0 (src/huggingface_hub/hf_api.py): `list_repo_commits` (GET
/api/datasets/{repo}/commits/{revision}: id, title, date; newest first), `list_repo_tree`
(GET .../tree/{revision}/{path}?recursive=true: each file's `path` and `oid`, the git blob id,
as RepoFile.blob_id) and file_download.py `hf_hub_download` (a file at one commit). The cost
is bounded: at most MAX_COMMITS commits (the newest up to the audited one; more: UNKNOWN),
one tree listing per commit, restricted to the upload's prefix, and a download only of the
files judged by content (KEYED_TABLES, events.jsonl) at the commits where their blob changed,
each read up to MAX_TEXT_BYTES.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.io.safeio import read_bytes as safe_bytes
from harness.results.layout import ATTEMPTS_TSV, EVENTS_JSONL, TIMING_LAUNCHES_TSV

MAX_COMMITS = 256
MAX_TEXT_BYTES = 64 << 20
KEYED_TABLES = (ATTEMPTS_TSV, TIMING_LAUNCHES_TSV)   # a row per launch: never rewritten
APPEND_ONLY = (EVENTS_JSONL,)                         # earlier bytes stay its prefix
CONTENT_FILES = KEYED_TABLES + APPEND_ONLY


@dataclass
class History:
    """What each commit (oldest first) held under one prefix: {path inside the upload: blob
    id}, and the content of CONTENT_FILES at the commits where their blob changed."""

    repo: str
    commits: list[str] = field(default_factory=list)
    trees: list[dict[str, str]] = field(default_factory=list)
    texts: dict[tuple[int, str], bytes] = field(default_factory=dict)
    problem: str | None = None                  # why the history could not be read whole


class RepoHistory:
    """A repository's commits up to the audited one, read once; trees per upload prefix."""

    def __init__(self, repo: str, revision: str, cache: Path) -> None:
        from huggingface_hub import HfApi  # lazy: only hf:// targets need the hub
        self.repo, self.cache, self.api = repo, cache, HfApi()
        self.problem: str | None = None
        try:
            newest_first = [c.commit_id for c in self.api.list_repo_commits(
                repo, repo_type="dataset", revision=revision)]
        except Exception as exc:  # noqa: BLE001 -- the hub raises many classes; say which
            newest_first, self.problem = [], f"commits not listed: {type(exc).__name__}"
        if len(newest_first) > MAX_COMMITS:
            self.problem = (f"{len(newest_first)} commits, over the {MAX_COMMITS} this audit "
                            f"reads: the oldest were not compared")
        self.commits = list(reversed(newest_first[:MAX_COMMITS]))

    def under(self, prefix: str) -> History:
        """The history of the files under `prefix` (paths relative to it)."""
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError
        out = History(self.repo, list(self.commits), problem=self.problem)
        for index, commit in enumerate(self.commits):
            try:
                entries = self.api.list_repo_tree(self.repo, path_in_repo=prefix.rstrip("/")
                                                  or None, revision=commit, recursive=True,
                                                  repo_type="dataset")
                tree = {e.path[len(prefix):]: e.blob_id for e in entries
                        if hasattr(e, "blob_id") and e.path.startswith(prefix)}
            except EntryNotFoundError:
                tree = {}                               # the prefix not there yet
            except Exception as exc:  # noqa: BLE001 -- say which, judge nothing
                out.problem = f"tree of {commit[:12]} not listed: {type(exc).__name__}"
                return out
            out.trees.append(tree)
            for rel, blob in tree.items():
                if Path(rel).name not in CONTENT_FILES:
                    continue
                if index and out.trees[index - 1].get(rel) == blob:
                    continue
                try:
                    local = hf_hub_download(self.repo, prefix + rel, repo_type="dataset",
                                            revision=commit, cache_dir=self.cache)
                    out.texts[(index, rel)] = safe_bytes(local, max_bytes=MAX_TEXT_BYTES)
                except Exception as exc:  # noqa: BLE001 -- say which, judge nothing
                    out.problem = (f"{rel} at {commit[:12]} not fetched: "
                                   f"{type(exc).__name__}")
                    return out
        return out
