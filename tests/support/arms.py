"""Running the receiver's arms as the app does, for the tests of each forge's ``receive`` and of ``arms``:
the configuration read from one environment, a boot refusal's message, and an arm's three steps.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from multidict import CIMultiDict

from pidispatch.common.errors import ConfigError
from pidispatch.common.settings import load_settings
from pidispatch.forges.armconfig import ReceiverConfig
from pidispatch.forges.arms import Arm, Classification, RequestHead
from pidispatch.forges.receive import configure_arms, load_receiver_config
from pidispatch.forges.refusals import ReceiverRefusal

NOW_MS = 1_700_000_000_000
BODY = b'{"action":"opened"}'
# Events no forge's arm may ever store: the router could never act on them.
NEVER_STORED = ("ping", "push", "create", "release", "repository", "wiki", "git.push", "build.complete")


def receiver_config(env: Mapping[str, str]) -> ReceiverConfig:
    """As the process reads it: settings and the receiver's own variables from one environment."""
    return load_receiver_config(load_settings(env), env)


def refused(env: Mapping[str, str]) -> str:
    """The one-line message the receiver refuses to start with."""
    with pytest.raises(ConfigError) as info:
        receiver_config(env)
    message = str(info.value)
    assert "\n" not in message
    return message


def arm_for(env: Mapping[str, str], forge: str) -> Arm:
    return configure_arms(receiver_config(env))[forge]


def run_arm(
    arm: Arm, headers: Mapping[str, str], body: bytes = BODY, method: str = "POST", now_ms: int = NOW_MS
) -> tuple[RequestHead, int | ReceiverRefusal | None, Classification | ReceiverRefusal | None]:
    """The three steps as the app runs them, stopping at the first refusal."""
    head = arm.head(method, CIMultiDict(headers), len(body))
    if head.refusal is not None:
        return head, None, None
    matched = arm.authenticate(head, body, now_ms)
    if isinstance(matched, ReceiverRefusal):
        return head, matched, None
    return head, matched, arm.classify(head, body)
