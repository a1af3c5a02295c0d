"""docs/configuration.md against the loaders' own tables: every triggers.json field and every environment
variable the page lists as honoured or refused is exactly what the code accepts or refuses, and why."""

from __future__ import annotations

import re
from pathlib import Path

from pidispatch.common.unsupported import HONOURED, UNSUPPORTED
from pidispatch.triggers.loader import ENTRY_KEYS, FILE_KEYS, ON_KEYS, REFUSED_ON, REFUSED_ON_TYPES
from pidispatch.triggers.runfields import REFUSED_RUN, REFUSED_RUN_TRUE, RUN_KEYS, cron_run_keys

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
NAME = re.compile(r"`([^`]+)`")

Row = tuple[str, ...]


def _table(heading: str) -> list[Row]:
    """The rows of the first table under ``## heading``: cells stripped, header and rule left out."""
    section = DOC.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [tuple(cell.strip() for cell in line.strip("|").split(" | ")) for line in lines[2:]]


def _types(cell: str) -> frozenset[str]:
    return frozenset() if cell == "—" else frozenset(t.strip() for t in cell.split(","))


FIELDS = [(NAME.fullmatch(f).group(1), _types(t), status, why)  # type: ignore[union-attr]
          for f, t, status, why in _table("triggers.json")]
ON_TYPES = frozenset(t for t in ON_KEYS if t not in REFUSED_ON_TYPES)
WEBHOOK_TYPES = ON_TYPES - {"cron"}


def _rows(prefix: str, status: str) -> list[tuple[str, frozenset[str], str]]:
    return [(path.removeprefix(prefix), types, why) for path, types, s, why in FIELDS
            if s == status and path.startswith(prefix)]


def test_every_row_is_honoured_or_refused_and_names_each_field_once_per_type() -> None:
    assert {status for _, _, status, _ in FIELDS} == {"honoured", "refused"}
    pairs = [(path, t) for path, types, _, _ in FIELDS for t in types or {"—"}]
    assert len(pairs) == len(set(pairs))


def test_the_file_and_entry_keys_are_the_loaders() -> None:
    levels = [(path, status) for path, types, status, _ in FIELDS if not types]
    assert levels == [(path, "honoured") for path in (*FILE_KEYS, *(f"triggers[].{k}" for k in ENTRY_KEYS))]


def test_the_on_keys_honoured_per_type_are_the_loaders() -> None:
    documented = {(key, types) for key, types, _ in _rows("on.", "honoured")}
    accepted: dict[str, set[str]] = {}
    for on_type in ON_TYPES:
        for key in ON_KEYS[on_type]:
            accepted.setdefault(key, set()).add(on_type)
    assert documented == {(key, frozenset(types)) for key, types in accepted.items()}


def test_the_refused_on_types_and_keys_are_the_loaders_with_their_reasons() -> None:
    refused = _rows("on.", "refused")
    assert {(types, why) for key, types, why in refused if key == "type"} == {
        (frozenset({t}), why) for t, why in REFUSED_ON_TYPES.items()
    }
    assert {key: why for key, _, why in refused if key != "type"} == REFUSED_ON
    assert all(types <= WEBHOOK_TYPES for key, types, _ in refused if key != "type")


def test_the_run_keys_are_the_loaders_for_every_webhook_type_with_the_refusal_reasons() -> None:
    honoured, refused = _rows("run.", "honoured"), _rows("run.", "refused")
    assert [key for key, _, _ in honoured] == list(RUN_KEYS)
    assert {key: why for key, _, why in refused} == REFUSED_RUN
    assert {types for _, types, _ in honoured + refused} == {WEBHOOK_TYPES}


def test_the_run_switches_whose_true_is_refused_say_so_with_the_loaders_reasons() -> None:
    notes = {key: why for key, _, why in _rows("run.", "honoured") if key in REFUSED_RUN_TRUE}
    assert notes == {key: f"`false` or absent only: `true` is refused ({why})"
                     for key, why in REFUSED_RUN_TRUE.items()}


def test_the_cron_run_keys_are_the_loaders_in_order() -> None:
    rows = _table("Cron triggers")
    assert [NAME.fullmatch(f).group(1) for f, _, _ in rows] == [  # type: ignore[union-attr]
        f"run.{key}" for key in cron_run_keys()
    ]


VARIABLES = [(tuple(NAME.findall(names)), status, why)
             for names, status, why in _table("Environment variables")]


def test_the_honoured_variables_are_the_table_of_what_the_loaders_read() -> None:
    documented = [name for names, status, _ in VARIABLES if status == "honoured" for name in names]
    assert sorted(documented) == sorted(HONOURED)
    assert len(documented) == len(set(documented))


def test_the_refused_variables_are_the_table_with_what_to_do_instead() -> None:
    refused = [(name, why) for names, status, why in VARIABLES if status == "refused" for name in names]
    assert dict(refused) == UNSUPPORTED and len(refused) == len(UNSUPPORTED)
    assert {status for _, status, _ in VARIABLES} == {"honoured", "refused"}
