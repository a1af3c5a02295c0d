"""docs/flow.md names real functions and real keys.

Every backticked ``pidispatch.…`` name in the document must import and resolve (longest importable module
prefix, then ``getattr`` along the rest), so renaming a function the document names fails here. Every
backticked ``pd:…`` name must be a key ``Keys("pd")`` can build: each ``<…>`` part stands for one argument.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from pidispatch.common.keys import Keys, Space

DOC = Path(__file__).resolve().parents[2] / "docs" / "flow.md"

# A reference is a whole backticked span: `pidispatch.a.b.C.d` (no call parentheses, no spaces).
REFERENCE_RE = re.compile(r"`(pidispatch(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")
# A key is a whole backticked span starting with the default prefix and a name: `pd:job:<job id>`
# (the prose's `pd:…` is not one).
KEY_RE = re.compile(r"`(pd:[A-Za-z<][^`]*)`")
PLACEHOLDER_RE = re.compile(r"<[^<>]*>")
HOLE = "<>"


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def references(text: str) -> list[str]:
    return sorted(set(REFERENCE_RE.findall(text)))


def doc_keys(text: str) -> list[str]:
    return sorted(set(KEY_RE.findall(text)))


def resolve(dotted: str) -> object:
    """Import the longest module prefix of ``dotted``, then walk the rest as attributes.

    Raises ``ImportError`` when no prefix imports and ``AttributeError`` when an attribute is missing.
    """
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            found: object = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                raise  # the module exists but one of its own imports is missing: a real failure
            continue
        for attr in parts[cut:]:
            found = getattr(found, attr)
        return found
    raise ImportError(f"no module prefix of {dotted!r} imports")


def key_shapes(keys: Keys) -> set[str]:
    """Every name ``keys`` can build, each argument shown as ``<>``."""
    shapes: set[str] = set()
    for name, member in inspect.getmembers(type(keys)):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            value = getattr(keys, name)
            shapes.add(value.table(HOLE) if isinstance(value, Space) else value)
        elif inspect.isfunction(member) and inspect.signature(member).return_annotation in ("str", str):
            # One name a call (a window of prefixes is built from the same parts as its names).
            params = list(inspect.signature(member).parameters.values())[1:]
            shapes.add(getattr(keys, name)(*(HOLE for _ in params)))
    return shapes


def shape_of(key: str) -> str:
    return PLACEHOLDER_RE.sub(HOLE, key)


def matches(key: str, shapes: set[str]) -> bool:
    """``key`` is one of ``shapes``, with ``<…>`` as a placeholder or a concrete colon-free value."""
    shape = shape_of(key)
    if shape in shapes:
        return True
    return any(
        re.fullmatch(re.escape(s).replace(re.escape(HOLE), r"[^:]+"), shape) is not None for s in shapes
    )


def test_the_document_names_enough_to_be_checked() -> None:
    text = doc_text()
    # A parser that silently found nothing would pass every other test: the page names dozens of each.
    assert len(references(text)) >= 60
    assert len(doc_keys(text)) >= 15


@pytest.mark.parametrize("dotted", references(doc_text()))
def test_every_named_function_resolves(dotted: str) -> None:
    try:
        resolve(dotted)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"docs/flow.md names `{dotted}`, which does not resolve: {exc}")


@pytest.mark.parametrize("key", doc_keys(doc_text()))
def test_every_named_key_is_one_keys_builds(key: str) -> None:
    shapes = key_shapes(Keys("pd"))
    assert matches(key, shapes), f"docs/flow.md names `{key}`; Keys builds only {sorted(shapes)}"


def test_the_checks_catch_a_rename() -> None:
    # The checkers themselves: a misspelt attribute, a missing module and a key Keys never builds fail.
    with pytest.raises(AttributeError):
        resolve("pidispatch.receiver.app.Receiver.dispatch_renamed")
    with pytest.raises((ImportError, AttributeError)):
        resolve("pidispatch.nowhere.function")
    shapes = key_shapes(Keys("pd"))
    assert matches("pd:decided:<day>:<shard>", shapes)
    assert matches("pd:deliveries:4711", shapes)
    assert not matches("pd:events:<x>", shapes)
    assert not matches("pd:queue", shapes)
