"""What a forge package gives the receiver: ``pidispatch.forges.<name>.receive.RECEIVE``.

The receiver's generic modules iterate ``pidispatch.forges.FORGES`` and reach each forge's webhook
knowledge (its variables, its arm, the refusals only it answers) through ``Forge.receiver()`` alone, so
none of them names a forge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pidispatch.common.secret import Secret
    from pidispatch.common.settings import Settings
    from pidispatch.forges.arms import Arm
    from pidispatch.forges.refusals import ReceiverRefusal


class ArmConfig(Protocol):
    """One forge's webhook block as its ``load`` read it; the rest of the receiver reads only its secrets."""

    @property
    def secrets(self) -> tuple[Secret[bytes], ...]:
        """Current first, then the previous one while rotating."""
        ...


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
