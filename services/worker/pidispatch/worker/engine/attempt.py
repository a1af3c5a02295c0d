"""How one attempt of a job ended, as its record will say."""

from __future__ import annotations

from dataclasses import dataclass

from pidispatch.common.outcome import OutcomeName
from pidispatch.worker.engine.exitline import ExitInfo
from pidispatch.worker.engine.runner import RunResult


@dataclass(frozen=True)
class AttemptOutcome:
    """How one attempt ended, as its record will say; ``retry`` marks a failed attempt that may run again."""

    outcome: OutcomeName
    reason: str | None
    result: RunResult | None = None
    exit_info: ExitInfo | None = None
    budget_reserved: bool = False
    retry: bool = False
