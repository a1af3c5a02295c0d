"""The textual splice of one key into a trigger's ``on``: every other byte kept, escapes understood,
and None (nothing written) whenever it cannot be done safely."""

from __future__ import annotations

import json

import pytest

from pidispatch.worker.forgework.splice import add_on_key

MARK = {"at": "2026-05-01T10:00:00Z", "jobId": "gh-abc"}
PRETTY = """{
  "triggers": [
    {
      "on": { "type": "label", "any": ["a}\\"{b"] },
      "run": { "kind": "github", "flow": "fix" }
    },
    {
      "on": {
        "type": "issue",
        "action": ["closed"],
        "number": 40,
        "once": true
      },
      "run": { "kind": "github", "command": "say \\"}]\\" \\\\" }
    }
  ]
}
"""


def test_the_key_goes_after_the_last_member_in_the_objects_own_layout() -> None:
    out = add_on_key(PRETTY, 1, "disarmed", MARK)
    assert out is not None
    added = ',\n        "disarmed": {"at": "2026-05-01T10:00:00Z", "jobId": "gh-abc"}'
    assert out == PRETTY.replace('"once": true', '"once": true' + added)
    assert json.loads(out)["triggers"][1]["on"]["disarmed"] == MARK


def test_a_one_line_object_gets_a_one_line_member_and_nothing_else_moves() -> None:
    text = '{"triggers":[{"on":{"type":"issue","once":true},"run":{"kind":"github","flow":"x"}}]}'
    out = add_on_key(text, 0, "disarmed", MARK)
    assert out == text.replace('"once":true', '"once":true,"disarmed": ' + json.dumps(MARK))


def test_braces_and_quotes_inside_strings_do_not_confuse_the_scan() -> None:
    # Entry 0 holds "a}\"{b" in a label: a scan that ignored escapes would lose its place.
    out = add_on_key(PRETTY, 0, "disarmed", MARK)
    assert out is not None
    data = json.loads(out)
    assert data["triggers"][0]["on"] == {"type": "label", "any": ['a}"{b'], "disarmed": MARK}
    assert data["triggers"][1] == json.loads(PRETTY)["triggers"][1]


def test_an_escaped_key_spelling_is_the_key_it_decodes_to() -> None:
    text = '{"triggers": [{"\\u006fn": {"type": "issue"}, "run": {"kind": "github"}}]}'
    out = add_on_key(text, 0, "disarmed", MARK)
    assert out is not None and json.loads(out)["triggers"][0]["on"]["disarmed"] == MARK


@pytest.mark.parametrize(("case", "text", "index"), [
    ("index_out_of_range", PRETTY, 2),
    ("key_already_there", PRETTY.replace('"once": true', '"once": true, "disarmed": {"at": "x"}'), 1),
    ("duplicate_key", PRETTY.replace('"number": 40,', '"number": 40, "number": 41,'), 1),
    ("not_json", PRETTY[:-5], 1),
    ("on_not_an_object", '{"triggers": [{"on": [1], "run": {}}]}', 0),
    ("triggers_not_an_array", '{"triggers": {"0": {"on": {"type": "issue"}}}}', 0),
    ("empty_on", '{"triggers": [{"on": {}, "run": {}}]}', 0),
    ("nan", '{"triggers": [{"on": {"type": "issue", "n": NaN}, "run": {}}]}', 0),
])
def test_anything_unsafe_returns_none(case: str, text: str, index: int) -> None:
    assert add_on_key(text, index, "disarmed", MARK) is None, case
