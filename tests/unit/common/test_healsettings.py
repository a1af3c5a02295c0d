"""pidispatch.common.healsettings: healing is off unless PD_HEAL_INTERVAL_S is set; the window stays
within what GitHub keeps, and a value past it stops the process (exit 2) naming the variable."""

from __future__ import annotations

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.common.healsettings import HealSettings, load_heal_settings
from pidispatch.common.settings import load_settings


def test_healing_is_off_by_default_and_reads_a_day_back() -> None:
    assert load_heal_settings({}) == HealSettings(interval_s=None, window_h=24)
    assert load_settings({}).heal.window_ms == 24 * 3_600_000


def test_an_interval_turns_it_on() -> None:
    heal = load_settings({"PD_HEAL_INTERVAL_S": "600", "PD_HEAL_WINDOW_H": "72"}).heal
    assert (heal.interval_s, heal.window_h) == (600, 72)


@pytest.mark.parametrize(("env", "message"), [
    ({"PD_HEAL_WINDOW_H": "73"}, "PD_HEAL_WINDOW_H=73 is out of range; accepted: 1..72"),
    ({"PD_HEAL_WINDOW_H": "0"}, "PD_HEAL_WINDOW_H=0 is out of range; accepted: 1..72"),
    ({"PD_HEAL_INTERVAL_S": "5"}, "PD_HEAL_INTERVAL_S=5 is out of range; accepted: 60..86400"),
    ({"PD_HEAL_INTERVAL_S": "often"}, "PD_HEAL_INTERVAL_S='often' is not an integer; accepted: 60..86400"),
])
def test_a_value_outside_what_is_accepted_is_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env)
    assert str(err.value) == message
