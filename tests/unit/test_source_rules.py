"""Rules the whole source tree keeps, checked over libs/ and services/: forge knowledge lives in the forge
package, class names are unique, and no line cites a document this repository does not hold."""

from __future__ import annotations

import ast
import re
from collections import defaultdict

from tests.support.sources import ROOT, SOURCES

FORGE_PACKAGE = ROOT / "libs" / "common" / "pidispatch" / "forges"
# Dev tooling's stand-in plays one forge by definition: the only other module allowed to name it.
STAND_IN = ROOT / "services" / "dev" / "pidispatch" / "dev" / "forgestandin.py"
FORGE_NAME = re.compile(r"github|gitlab|forgejo|gitea|azure", re.IGNORECASE)
# A configuration variable's name (GITLAB_WEBHOOK_SECRET) may name its forge anywhere.
VARIABLE = re.compile(r"[A-Z0-9_]*(?:GITHUB|GITLAB|FORGEJO|GITEA|AZURE)[A-Z0-9_]*")
CITATION = re.compile(r"spec (?:worker|ingest)|DESIGN\.md|§")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def forge_literals(source: str) -> list[str]:
    """String literals (docstrings aside) that name a forge other than inside a variable's name."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        and FORGE_NAME.search(VARIABLE.sub("", node.value))
    ]


def test_sources_were_found() -> None:
    assert len(SOURCES) > 100 and any(FORGE_PACKAGE in p.parents for p in SOURCES)


def test_no_module_outside_the_forge_package_names_a_forge() -> None:
    found = {
        str(p.relative_to(ROOT)): hits for p in SOURCES
        if FORGE_PACKAGE not in p.parents and p != STAND_IN and (hits := forge_literals(p.read_text()))
    }
    assert found == {}


def test_the_forge_literal_check_catches_what_it_must() -> None:
    assert forge_literals('x = "github"') == ["github"]
    assert forge_literals('x = "X-Gitea-Event"') == ["X-Gitea-Event"]
    assert forge_literals('x = "set GITLAB_TOKEN"') == []
    assert forge_literals('"""About GitHub."""') == []


def test_no_two_classes_share_a_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for p in SOURCES:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(p.relative_to(ROOT)))
    assert {name: files for name, files in where.items() if len(files) > 1} == {}


def test_no_line_cites_a_document_outside_the_repository() -> None:
    cited = [
        f"{p.relative_to(ROOT)}:{n}" for p in SOURCES
        for n, line in enumerate(p.read_text().splitlines(), 1) if CITATION.search(line)
    ]
    assert cited == []


def test_no_test_module_imports_another() -> None:
    # Shared helpers live in tests/support; a test importing a test drags its fixtures and collection along.
    importing = re.compile(r"^\s*(?:from|import) tests\.(?:unit|integration|e2e)\b", re.MULTILINE)
    tests = sorted((ROOT / "tests").rglob("*.py"))
    found = [str(p.relative_to(ROOT)) for p in tests if importing.search(p.read_text())]
    assert found == []

