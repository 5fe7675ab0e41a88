"""What a campaign does with an `unclassified` run: a stated, configurable policy (pure).

The taxonomy says `unclassified` when neither a signature nor the structure of the run
(who exited first, with what signal, which pid the OOM killer took, which GPU an Xid named)
says why it failed. Default: retry it once as if it were infra (a transient fault is the
cheapest guess to test), then stop for a person with `epcap classify --explain`'s timeline.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import BadInput

ACTIONS = ("stop", "continue")


@dataclass(frozen=True)
class UnclassifiedPolicy:
    """Retry an unclassified run `retries` times, then `stop` (for a person) or `continue`."""

    retries: int = 1
    then: str = "stop"

    def action(self, tries_so_far: int) -> str:
        """`retry`, or the final action, after this many unclassified tries of one cell."""
        return "retry" if tries_so_far <= self.retries else self.then

    @classmethod
    def from_doc(cls, doc: dict | None) -> UnclassifiedPolicy:
        """The policy from a mapping `{retries: N, then: stop|continue}` (absent: default)."""
        doc = doc or {}
        retries, then = doc.get("retries", 1), doc.get("then", "stop")
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 10:
            raise BadInput(f"retries {retries!r}: an integer 0..10", field="unclassified.retries")
        if then not in ACTIONS:
            raise BadInput(f"then {then!r}: one of {', '.join(ACTIONS)}",
                           field="unclassified.then")
        return cls(retries, then)


DEFAULT_POLICY = UnclassifiedPolicy()
