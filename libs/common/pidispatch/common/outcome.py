"""How a step of a job's ladder can end short of running: a named refusal, or a retried fault.

A ``JobRefusal`` is determinate: recorded ``policy`` with its reason token, never retried.
A ``JobConfigRefused`` is raised where a step finds the job unrunnable; recorded ``config-refused``.
An ``InfraFault`` is an infrastructure failure: the attempt is recorded ``failed`` and the job retried
while attempts remain. ``refund`` says whether nothing was spent, so a budget slot
reserved for the attempt is given back (only ``container-never-started`` and faults before the container).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The outcome an attempt's record carries: ``policy`` is a determinate stop, ``failed`` may be retried.
OutcomeName = Literal["completed", "policy", "failed"]


@dataclass(frozen=True)
class JobRefusal:
    reason: str
    budget_reserved: bool = False


class JobConfigRefused(Exception):
    """This job cannot run as configured: its own fields, the forge's answer or a credential it needs.
    Recorded ``config-refused`` and never retried; unlike ``ConfigError`` the worker does not exit."""


class InfraFault(Exception):
    """A retried failure; ``reason`` is a token (``secret-resolver-unreachable``), never a message."""

    def __init__(self, reason: str, *, refund: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.refund = refund
