"""The import contracts of pyproject.toml hold on this tree, and break on a deliberate violation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.importcycles import shortest_cycle, strongly_connected
from tests.support.sources import ROOT

LINT = Path(sys.executable).with_name("lint-imports")
SOURCE_DIRS = ("libs/common", "services/receiver", "services/router", "services/worker", "services/console",
               "services/dev")


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on ``tree``'s own copy of the sources, ahead of the installed ones on the path."""
    path = os.pathsep.join([str(tree), *(str(tree / d) for d in SOURCE_DIRS)])
    env = {**os.environ, "COLUMNS": "400", "PYTHONPATH": path}
    return subprocess.run([str(LINT), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for d in SOURCE_DIRS:
        shutil.copytree(ROOT / d / "pidispatch", tmp_path / d / "pidispatch",
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests" / "support", tmp_path / "tests" / "support",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "tests" / "__init__.py").write_text("")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    result = lint(tree)
    assert result.returncode == 0, result.stdout
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def test_a_library_importing_a_service_breaks_the_layers(tree: Path) -> None:
    keys = tree / "libs/common/pidispatch/common/keys.py"
    keys.write_text(keys.read_text() + "\nfrom pidispatch.router import trim  # noqa\n")
    result = lint(tree)
    assert result.returncode == 1
    assert "Layers point down BROKEN" in result.stdout
    assert "pidispatch.common.keys -> pidispatch.router.trim" in result.stdout


def test_a_service_importing_another_breaks_the_layers(tree: Path) -> None:
    trim = tree / "services/router/pidispatch/router/trim.py"
    hidden = "\n\ndef _f() -> None:\n    from pidispatch.worker import metrics  # noqa\n"
    trim.write_text(trim.read_text() + hidden)
    result = lint(tree)
    assert result.returncode == 1
    assert "Layers point down BROKEN" in result.stdout


def test_a_cycle_hidden_in_a_function_breaks_the_acyclic_contract(tree: Path) -> None:
    jobs = tree / "libs/common/pidispatch/triggers/jobs.py"
    hidden = "\n\ndef _f() -> None:\n    from pidispatch.triggers import loader  # noqa\n"
    jobs.write_text(jobs.read_text() + hidden)
    result = lint(tree)
    assert result.returncode == 1
    assert "No import cycle, counting imports in functions and under TYPE_CHECKING BROKEN" in result.stdout
    cycle = next(line for line in result.stdout.splitlines() if line.startswith("Import cycle: "))
    assert "pidispatch.triggers.jobs -> pidispatch.triggers.loader" in cycle


def test_components_and_cycles_on_a_small_graph() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert strongly_connected(set(edges), edges) == [["a", "b", "c"]]
    assert shortest_cycle(["a", "b", "c"], edges) == ["a", "b", "c", "a"]
    assert strongly_connected({"d"}, {"d": set()}) == []
