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

from harness.io.atomic import write_text_atomic
from harness.io.bounds import json_loads
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


def read_facts(results_dir: Path) -> CampaignFacts:
    """campaign.json as written by the campaign; every fact None when the file is absent
    or not a JSON object (results from before it existed)."""
    path = Path(results_dir) / CAMPAIGN_JSON
    if not os.path.lexists(path):
        return CampaignFacts()
    text = read_text(path, max_bytes=JSON_MAX_BYTES)   # a FIFO, /dev/zero, a huge file: BadInput
    try:
        data = json_loads(text)
    except (ValueError, RecursionError):
        return CampaignFacts()
    return CampaignFacts.from_json(data)
