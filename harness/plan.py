"""Plan: runbook -> ordered cells; cell names and directories (SPEC section 4)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.capacity import capacity_tag

PURPOSES = ("canary", "measure", "validate", "time")


@dataclass(frozen=True)
class Cell:
    """One run: (model, backend, purpose, capacity, attempt)."""

    campaign: str
    model: str
    backend: str
    purpose: str                    # canary | measure | validate | time
    capacity: str                   # decimal string, e.g. "2.00", "1.03125"
    attempt: int = 1

    @property
    def name(self) -> str:
        """Directory name: <MODEL>__<backend>__<purpose>__cap<TAG>__a<N>."""
        return (f"{self.model}__{self.backend}__{self.purpose}__"
                f"{capacity_tag(self.capacity)}__a{self.attempt}")  # tag = cap2p00
