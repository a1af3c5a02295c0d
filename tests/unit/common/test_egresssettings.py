"""PI_EGRESS and its allowlist file: on by default, exactly 0 or 1, every line a host or refused by line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pidispatch.common.egresssettings import Destination, parse_allowlist, parse_destination
from pidispatch.common.errors import ConfigError
from pidispatch.common.settings import load_settings


def test_egress_is_on_by_default_and_zero_turns_it_off() -> None:
    assert load_settings({}).egress.enabled is True
    assert load_settings({"PI_EGRESS": "1"}).egress.enabled is True
    assert load_settings({"PI_EGRESS": "0"}).egress.enabled is False


@pytest.mark.parametrize("raw", ["off", "false", "2", "yes"])
def test_any_other_value_is_refused_naming_what_is_accepted(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"^PI_EGRESS=.* is refused; accepted: 1 .* or 0 "):
        load_settings({"PI_EGRESS": raw})


@pytest.mark.parametrize(("text", "expected"), [
    ("api.github.com", Destination("api.github.com")),
    (".GitHub.com", Destination(".github.com")),
    ("registry.npmjs.org:443", Destination("registry.npmjs.org", 443)),
    ("172.17.0.1:8080", Destination("172.17.0.1", 8080)),
    ("[::1]:80", Destination("::1", 80)),
    ("10.0.0.5", Destination("10.0.0.5")),
])
def test_a_destination_is_a_name_a_dotted_suffix_or_an_address_with_an_optional_port(
    text: str, expected: Destination
) -> None:
    assert parse_destination(text) == expected


@pytest.mark.parametrize("text", ["bad_host", "a..b", "host:0", "host:70000", "-x.com", "x.com/path",
                                  "http://x.com", "a b", "*.x.com", "[::1"])
def test_anything_else_is_not_a_destination(text: str) -> None:
    assert parse_destination(text) is None


def test_the_file_skips_comments_and_blanks_and_names_the_first_bad_line(tmp_path: Path) -> None:
    entries = parse_allowlist("a.txt", "# mirrors\nregistry.npmjs.org\n\n.pypi.org  # and files\n")
    assert entries == (Destination("registry.npmjs.org"), Destination(".pypi.org"))
    with pytest.raises(ConfigError, match=r"^PI_EGRESS_ALLOWLIST a.txt:3: 'not a host' is refused; accepted"):
        parse_allowlist("a.txt", "ok.example\n\nnot a host\n")


def test_the_file_is_read_at_load_and_a_missing_one_refuses_the_start(tmp_path: Path) -> None:
    path = tmp_path / "allow.txt"
    path.write_text("pypi.org\n")
    assert load_settings({"PI_EGRESS_ALLOWLIST": str(path)}).egress.allowlist == (Destination("pypi.org"),)
    with pytest.raises(ConfigError, match=r"^PI_EGRESS_ALLOWLIST .*gone.txt cannot be read"):
        load_settings({"PI_EGRESS_ALLOWLIST": str(tmp_path / "gone.txt")})
