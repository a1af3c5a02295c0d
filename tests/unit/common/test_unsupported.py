"""Environment variables pi-dispatch does not implement: each is refused when set, unless the allow-list
names it; the allow-list itself refuses a name the table lacks; the two tables never overlap."""

from __future__ import annotations

import json
import re

import pytest

from pidispatch.common import unsupported
from pidispatch.common.errors import ConfigError
from pidispatch.common.settings import load_settings
from pidispatch.common.unsupported import (
    ALLOW_VARIABLE,
    HONOURED,
    UNSUPPORTED,
    allowed_unsupported,
    check_environment,
    unknown_line,
    unknown_variables,
)
from tests.support.sources import ROOT

SOURCES = sorted(p for top in ("libs", "services") for p in (ROOT / top).glob("*/pidispatch/**/*.py"))
TABLE = ROOT / "libs" / "common" / "pidispatch" / "common" / "unsupported.py"
# Honoured here, read by code arriving on another branch at the same time.
IN_FLIGHT: set[str] = set()
# How the loaders read a variable: get(env, "X"), _int(env, "X", ...), read_var(env, "X"), environ.get("X").
# The operating system's own, read as every program reads them (a git child's PATH).
SYSTEM = {"PATH", "HOME", "TZ", "TMPDIR"}
READ = re.compile(r'(?:\(env, |environ\.get\()"([A-Z][A-Z0-9_]*)"')


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_each_unimplemented_variable_set_stops_the_process_naming_what_to_do(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings({name: "1"})
    assert str(err.value) == (f"{name} is set but pi-dispatch does not implement it; {UNSUPPORTED[name]} "
                              f"(or list it in {ALLOW_VARIABLE} to start anyway)")


def test_a_blank_value_is_unset() -> None:
    assert allowed_unsupported({"PI_SETTINGS_FILE": "  ", "PI_MODEL_ENDPOINTS_FILE": ""}) == ()


def test_the_allow_list_lets_named_variables_through_in_table_order() -> None:
    env = {"PI_MODEL_ENDPOINTS_FILE": "notify", "PI_SETTINGS_FILE": "/x",
           ALLOW_VARIABLE: " PI_MODEL_ENDPOINTS_FILE , PI_SETTINGS_FILE,"}
    assert allowed_unsupported(env) == ("PI_SETTINGS_FILE", "PI_MODEL_ENDPOINTS_FILE")
    # A listed variable that is not set is no warning.
    assert allowed_unsupported({ALLOW_VARIABLE: "PI_MODEL_ENDPOINTS_FILE"}) == ()


def test_an_allow_list_does_not_allow_a_variable_it_does_not_name() -> None:
    with pytest.raises(ConfigError, match=r"^PI_SETTINGS_FILE is set"):
        allowed_unsupported(
            {"PI_SETTINGS_FILE": "/x", "PI_MODEL_ENDPOINTS_FILE": "y",
             ALLOW_VARIABLE: "PI_MODEL_ENDPOINTS_FILE"}
        )


def test_a_typo_in_the_allow_list_is_refused_naming_the_nearest_entry() -> None:
    with pytest.raises(ConfigError) as err:
        allowed_unsupported({ALLOW_VARIABLE: "PI_SESSION_DIR"})
    assert str(err.value) == (
        "PD_ALLOW_UNSUPPORTED names 'PI_SESSION_DIR', which is not a variable pi-dispatch refuses; did you "
        "mean PI_SESSIONS_DIR? accepted: names from docs/configuration.md"
    )


def test_an_implemented_variable_in_the_allow_list_is_refused_as_implemented() -> None:
    with pytest.raises(ConfigError, match="names 'PI_MODEL', which pi-dispatch implements"):
        allowed_unsupported({ALLOW_VARIABLE: "PI_MODEL"})


def test_the_warning_is_one_json_line_on_stderr_once_per_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(unsupported, "_warned", set())
    env = {"PI_EGRESS_PROXY": "p", "PI_BACKENDS": "local", ALLOW_VARIABLE: "PI_EGRESS_PROXY,PI_BACKENDS"}
    check_environment(env)
    check_environment(env)
    out, err = capsys.readouterr()
    [line] = err.splitlines()
    assert out == ""
    warning = json.loads(line)
    assert (warning["event"], warning["level"]) == ("unsupported_variable_allowed", "warning")
    assert warning["names"] == ["PI_BACKENDS", "PI_EGRESS_PROXY"]


def test_the_dollar_cost_windows_are_refused() -> None:
    assert {"PI_DAILY_COST_USD", "PI_WEEKLY_COST_USD", "PI_MONTHLY_COST_USD"} <= set(UNSUPPORTED)


def test_the_tables_do_not_overlap_and_name_each_variable_once() -> None:
    assert not set(HONOURED) & set(UNSUPPORTED)
    assert len(HONOURED) == len(set(HONOURED))
    assert {"PI_MAX_COST_USD", "VALKEY_PASSWORD", "REDIS_PASSWORD"} <= set(HONOURED)


def test_every_honoured_variable_is_named_by_the_code_outside_the_table() -> None:
    text = "\n".join(p.read_text() for p in SOURCES if p != TABLE)
    missing = sorted(n for n in HONOURED if f'"{n}"' not in text and n not in IN_FLIGHT)
    # The allow-list is read by the table's own module.
    assert missing == [ALLOW_VARIABLE]


def test_every_variable_a_loader_reads_is_in_the_honoured_table() -> None:
    read = {name for p in SOURCES if p != TABLE for name in READ.findall(p.read_text())}
    assert len(read) > 40
    assert sorted(read - set(HONOURED) - SYSTEM) == []


def test_every_unimplemented_variable_set_is_named_in_one_refusal() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings({"PI_SANDBOX_DIR": "/x", "PI_SESSIONS_DIR": "/y"})
    text = str(err.value)
    assert text.startswith(
        "PI_SANDBOX_DIR, PI_SESSIONS_DIR are set but pi-dispatch does not implement them ("
    )
    assert "\n" not in text


def test_a_misspelled_variable_is_named_with_the_one_meant() -> None:
    env = {"PI_CONCURENCY": "3", "PI_DAILY_CAPP": "1", "PD_NOT_A_THING": "1", "GITHUB_SHA": "abc",
           "PI_CONCURRENCY": "3", "HOME": "/root"}
    assert unknown_variables(env) == [
        ("PD_NOT_A_THING", None), ("PI_CONCURENCY", "PI_CONCURRENCY"), ("PI_DAILY_CAPP", "PI_DAILY_CAP"),
    ]
    assert unknown_line(unknown_variables({"PI_CONCURENCY": "3"})) == (
        "unknown variable PI_CONCURENCY (did you mean PI_CONCURRENCY?): no process of pi-dispatch reads it"
    )


def test_unknown_variables_are_a_warning_line_at_start_not_a_refusal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    load_settings({"PI_CONCURENCY_TYPO_ONCE": "3"})
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["event"] == "unknown_variable" and line["level"] == "warning"
    assert line["names"] == ["PI_CONCURENCY_TYPO_ONCE"]
