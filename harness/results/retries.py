"""Which of a request's finished runs stands: the retry rule, in one place.

A failure of a class the campaign retries as a new attempt (`infra`, up to
`limits.infra_retries`; `unclassified`, up to `limits.unclassified.retries`) that a later run
of the same request followed was retried, and is skipped while that class's retries last.
`harness.pipeline.replay.next_standing` (the driver's resume and the audit's replay) and
`harness.results.events.superseded_infra` (`epcap status`'s counts) both step by
`next_standing` here (docs/campaign.md#failure-taxonomy-harnesstaxonomyjudgepy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from harness.vocab import Status

T = TypeVar("T")


@dataclass(frozen=True)
class RetryBudget:
    """The retries one request still has, per retried class (inf: an older log's unknown)."""

    infra: float = 0
    unclassified: float = 0

    def allows(self, status: str) -> bool:
        """Whether a run that ended `status` is retried as a new attempt."""
        if status == Status.INFRA:
            return self.infra > 0
        return status == Status.UNCLASSIFIED and self.unclassified > 0

    def spent(self, status: str) -> RetryBudget:
        """The budget after one retry of a `status` run."""
        field = "infra" if status == Status.INFRA else "unclassified"
        return replace(self, **{field: getattr(self, field) - 1})


def next_standing(following: Callable[[], T | None], status_of: Callable[[T], str],
                  budget: RetryBudget) -> tuple[T | None, RetryBudget]:
    """The run a request sees among its finished runs, taken in attempt order by
    `following()` (None when there are no more): a retried-class failure followed by a later
    run is skipped while its class has retries left. Returns (that run, or None when a new
    run is needed; the budget left for that new run)."""
    left = budget
    run = following()
    while run is not None and left.allows(status_of(run)):
        left = left.spent(status_of(run))
        later = following()
        if later is None:
            return None, left
        run = later
    return run, left
