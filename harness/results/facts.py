"""campaign.json: a campaign's grid, shapes, backends and timing settings as data, written
once by the campaign (harness.campaign.store.campaign_facts) and read by the report, so no
reader re-parses the runbook (docs/spec.md: results layout).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import BadInput
from harness.io.atomic import write_text_atomic
from harness.io.bounds import TooManyDigits, json_strict, problem
from harness.io.safeio import JSON_MAX_BYTES, read_text
from harness.results.layout import CAMPAIGN_JSON


@dataclass(frozen=True, kw_only=True)
class CampaignFacts:
    """The keys of campaign.json, in the order written. Read back leniently: a key an older
    campaign did not record is None, one this version does not know is ignored; values are
    as the JSON holds them (a reader checks the type of what it uses)."""

    campaign: str | None = None
    pad_multiple: int | None = None
    grid: str | None = None                  # "exact" | "decimals-D"
    measure_capacity: str | None = None
    shape: dict[str, Any] | None = None      # the runbook's shape, field by field
    models: dict[str, dict[str, Any]] | None = None  # name -> topk, experts, moe_layers, N
    backends: list[dict[str, Any]] | None = None     # name, selected, timed, implementation
    baseline: str | None = None
    launches: int | None = None
    max_cv: float | None = None

    def to_json(self) -> str:
        """The text of campaign.json."""
        return json.dumps(dataclasses.asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, data: Any) -> CampaignFacts:
        """The facts of a parsed campaign.json; all None when it is not a JSON object."""
        if not isinstance(data, dict):
            return cls()
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def write_facts(results_dir: Path, facts: CampaignFacts) -> None:
    """Write results_dir/campaign.json atomically."""
    write_text_atomic(Path(results_dir) / CAMPAIGN_JSON, facts.to_json())


# the type of each key as written (harness.campaign.store.campaign_facts); None: not recorded
KINDS: dict[str, tuple[type, ...]] = {
    "campaign": (str,), "pad_multiple": (int,), "grid": (str,), "measure_capacity": (str,),
    "shape": (dict,), "models": (dict,), "backends": (list,), "baseline": (str,),
    "launches": (int,), "max_cv": (int, float)}


def check_facts(data: Any, path: Path) -> CampaignFacts:
    """The typed boundary of campaign.json: an object whose known keys hold their kind (a
    bool is not a number) and whose numbers lie in bounds.RANGES; BadInput naming the file,
    the line of the key and the field otherwise. Unknown keys are ignored (a later version)."""
    if not isinstance(data, dict):
        raise BadInput("must be a JSON object", path=str(path), line=1)
    text = None
    for key, kinds in KINDS.items():
        value = data.get(key)
        if value is None:
            continue
        why = None
        if isinstance(value, bool) or not isinstance(value, kinds):
            why = f"must be {' or '.join(k.__name__ for k in kinds)}, got {type(value).__name__}"
        elif isinstance(value, (int, float)):
            why = problem(key, value)
        if why:
            if text is None:
                text = read_text(path, max_bytes=JSON_MAX_BYTES)
            at = text.find(json.dumps(key))
            raise BadInput(why, path=str(path), line=text.count("\n", 0, max(at, 0)) + 1,
                           field=key)
    return CampaignFacts.from_json(data)


def read_facts(results_dir: Path) -> CampaignFacts:
    """campaign.json through its typed boundary (bounded read, strict JSON: duplicated keys,
    NaN, 1e9999 and nesting too deep refused; then check_facts); every fact None when the
    file is absent (results from before it existed). A damaged one is BadInput naming file,
    line and field, never read as if it were absent."""
    path = Path(results_dir) / CAMPAIGN_JSON
    if not os.path.lexists(path):
        return CampaignFacts()
    text = read_text(path, max_bytes=JSON_MAX_BYTES)   # a FIFO, /dev/zero, a huge file: BadInput
    try:
        data = json_strict(text)
    except json.JSONDecodeError as exc:
        line = None if isinstance(exc, TooManyDigits) else exc.lineno
        raise BadInput(f"not accepted: {exc.msg}", path=str(path), line=line) from None
    except RecursionError:
        raise BadInput("not accepted: nested too deeply", path=str(path)) from None
    return check_facts(data, path)


def facts_problem(results_dir: Path) -> str | None:
    """Why campaign.json cannot be read through its boundary (None when absent or sound):
    what the audit states instead of judging an upload as if the file were not there."""
    try:
        read_facts(results_dir)
    except BadInput as exc:
        return str(exc)
    return None
