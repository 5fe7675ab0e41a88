"""Drive every model's pipeline synchronously with a source that answers its requests.

The campaign driver (harness/campaign/driver.py) runs the model pipelines against a launcher,
several cells at a time. `epcap audit` runs the *same* generators here, answering each
request from an upload's cells (harness/audit/rules/pipeline.py), and then compares the tables the
pipeline built with the upload's: a decision has one home, and a new stage in this room is
audited without a line in harness/audit/ (docs/architecture.md#the-audit-is-the-pipeline-replayed).

`next_standing` is the one rule for which of a request's finished runs the pipeline sees,
used by the driver's resume and by the audit alike (its loop is harness.results.retries,
which `epcap status` counts by too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.pipeline.decisions import Context, Outcome, Request, Stop, model_pipeline
from harness.results.retries import RetryBudget
from harness.results.retries import next_standing as retry_rule
from harness.runbook.model import Limits


def next_standing(following: Callable[[], Outcome | None], limits: Limits
                  ) -> tuple[Outcome | None, RetryBudget]:
    """The outcome a request sees from its finished runs, taken in attempt order by
    `following()` (None when there are no more): an infra or unclassified failure followed
    by a later run of the same request was retried and is skipped, at most
    `limits.infra_retries` / `limits.unclassified.retries` times (the one retry rule,
    harness.results.retries).

    Returns (the outcome, or None when a new run is needed; the retries still allowed for
    that new run)."""
    return retry_rule(following, lambda out: out.status, budget_of(limits))


def budget_of(limits: Limits) -> RetryBudget:
    """The retries a request starts with under the runbook's limits."""
    return RetryBudget(infra=limits.infra_retries, unclassified=limits.unclassified.retries)


@dataclass
class Replayed:
    """What one synchronous pass of the pipelines made: the context (selection, timing and
    comparison rows, and the pairs its steps ended: `stops`), every (request, outcome)
    answered, and the requests nobody answered (each stops its model's pipeline there, as a
    run that never finished stops the driver's)."""

    ctx: Context
    answered: list[tuple[Request, Outcome]] = field(default_factory=list)
    unanswered: list[Request] = field(default_factory=list)

    @property
    def stops(self) -> dict[tuple[str, str], Stop]:
        """The pairs a step ended, each with its stated Stop (stage, why, the selection
        columns it leaves empty): what the pipeline decided, for the audit to read."""
        return self.ctx.stops


Answer = Callable[[Request], "Outcome | None"]


def replay(ctx: Context, answer: Answer, models: list[str] | None = None) -> Replayed:
    """Run each model's pipeline (every runbook model unless `models` says) to its end or to
    its first unanswered request; the context holds the rows the steps built."""
    done = Replayed(ctx)
    for model in models if models is not None else [m.name for m in ctx.runbook.models]:
        pipe = model_pipeline(ctx, model)
        outcome: Outcome | None = None
        try:
            req = next(pipe)
            while True:
                outcome = answer(req)
                if outcome is None:
                    done.unanswered.append(req)
                    pipe.close()
                    break
                done.answered.append((req, outcome))
                req = pipe.send(outcome)
        except StopIteration:
            pass
    return done
