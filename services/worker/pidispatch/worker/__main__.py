"""``python -m pidispatch.worker``: the same entry as ``pi-dispatch worker``."""

from __future__ import annotations

import argparse
import sys

from pidispatch.common.cli import run
from pidispatch.worker.commands import worker_command

if __name__ == "__main__":
    sys.exit(run(worker_command, argparse.Namespace(service=True)))
