"""The project's own source files, for tests that check rules over the whole tree."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for top in ("libs", "services") for p in (ROOT / top).glob("*/pidispatch/**/*.py"))
