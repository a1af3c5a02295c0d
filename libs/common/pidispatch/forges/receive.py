"""What a forge package gives the receiver: ``pidispatch.forges.<name>.receive.RECEIVE``.

The receiver's generic modules iterate ``pidispatch.forges.FORGES`` and reach each forge's webhook
knowledge (its variables, its arm, the refusals only it answers) through ``receive_of(Forge)`` alone, so
none of them names a forge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, cast

from pidispatch import forges
from pidispatch.common.errors import ConfigError
from pidispatch.common.settings import Settings
from pidispatch.forges.armconfig import ArmConfig, ReceiverConfig, check_secret_lengths
from pidispatch.forges.arms import Arm
from pidispatch.forges.base import Forge
from pidispatch.forges.refusals import (
    DEFAULT_TABLE,
    INVALID_SIGNATURE,
    INVALID_TIMESTAMP,
    INVALID_TOKEN,
    MISSING_SIGNATURE,
    MISSING_TOKEN,
    ReceiverRefusal,
    not_configured,
)

if TYPE_CHECKING:
    pass


class ReceiverForge(Protocol):
    @property
    def setup_hint(self) -> str:
        """The variables an operator sets to serve this forge (help text, and the refusal to start
        without any arm)."""
        ...

    @property
    def refusals(self) -> tuple[ReceiverRefusal, ...]:
        """The answers only this forge gives; their tokens join ``refusals.reasons()``."""
        ...

    def load(self, settings: Settings, env: Mapping[str, str]) -> ArmConfig | None:
        """This forge's block, None when none of its variables is set; a bad or half-configured block
        raises ``ConfigError`` naming the variable and what is accepted."""
        ...

    def arm(self, config: ArmConfig) -> Arm:
        """The arm that serves ``config``, the block this forge's ``load`` returned."""
        ...


def receive_of(forge: Forge) -> ReceiverForge:
    """The forge's ``receive`` part, typed."""
    return cast(ReceiverForge, forge.part("receive", "RECEIVE"))


def configure_arms(config: ReceiverConfig) -> dict[str, Arm]:
    """The arms ``config`` describes, by forge name (``load_receiver_config`` refused bad ones)."""
    return {name: receive_of(forges.by_name(name)).arm(block) for name, block in config.arms.items()}


def reasons() -> frozenset[str]:
    """Every reason token the receiver logs, for the metric's documentation and the tests that pin the set.

    A function, not a constant: each forge's rows are in its ``receive`` module, loaded on first use.
    """
    shared = (
        *DEFAULT_TABLE,
        MISSING_SIGNATURE,
        INVALID_SIGNATURE,
        INVALID_TIMESTAMP,
        MISSING_TOKEN,
        INVALID_TOKEN,
        *(not_configured(forge.name) for forge in forges.FORGES),
    )
    own = (row for forge in forges.FORGES for row in receive_of(forge).refusals)
    return frozenset(row.reason for row in (*shared, *own))


def load_receiver_config(settings: Settings, env: Mapping[str, str]) -> ReceiverConfig:
    """Every arm this receiver serves; refuses a half-configured arm, a short secret, or no arm at all
    (exit 2).

    Each forge's ``load`` reads its own variables, in ``FORGES`` order (the first bad one is reported);
    secret lengths are checked once every arm is otherwise complete.
    """
    blocks = {forge.name: receive_of(forge).load(settings, env) for forge in forges.FORGES}
    check_secret_lengths(env)
    config = ReceiverConfig(arms={name: block for name, block in blocks.items() if block is not None})
    if not config.arms:
        *first, last = arm_hints()
        raise ConfigError(f"no webhook arm is configured; set {', '.join(first)}, or {last}")
    return config


def arm_hints() -> list[str]:
    """What an operator sets to serve each forge, in ``FORGES`` order: ``VARIABLES (Forge)``."""
    return [f"{receive_of(forge).setup_hint} ({forge.display})" for forge in forges.FORGES]
