# Sourced by scripts/dev and scripts/test: make ./.venv with the project installed (editable).
# Usage: ensure_venv [extra]   (extra = "dev" adds the test tools)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

pick_python() {
  for py in python3.13 python3.12 python3.11 python3; do
    if command -v "$py" >/dev/null 2>&1 &&
       "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  echo "pi-dispatch needs Python 3.11 or newer (apt-get install python3)" >&2
  return 1
}

ensure_venv() {
  local extra="${1:-}"
  local py
  py="$(pick_python)"
  if [ ! -x "$VENV/bin/python" ]; then
    if ! "$py" -m venv "$VENV" 2>/dev/null; then
      # Debian and Ubuntu ship venv separately.
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
        rm -rf "$VENV"; "$py" -m venv "$VENV"
      else
        echo "cannot create a virtual environment: sudo apt-get install python3-venv, then run again" >&2
        return 1
      fi
    fi
  fi
  local spec="$ROOT"
  [ -n "$extra" ] && spec="$ROOT[$extra]"
  # Reinstall only when the project metadata changed since the last install.
  local stamp="$VENV/.installed-$extra"
  if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$spec"
    touch "$stamp"
  fi
}
