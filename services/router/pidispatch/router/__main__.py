"""``python -m pidispatch.router``: the same entry as ``pi-dispatch router``."""

from __future__ import annotations

import argparse
import sys

from pidispatch.common.cli import run
from pidispatch.router.commands import serve

if __name__ == "__main__":
    sys.exit(run(serve, argparse.Namespace(service=True)))
