"""``python -m pidispatch.dev.deathsig PARENT ARGV...``: exec ``ARGV`` so that it gets SIGTERM when dev dies.

Linux's ``PR_SET_PDEATHSIG`` survives ``execve``, so a ``kill -9`` of dev (which runs no cleanup) still
stops its redis-server and services; a parent already gone before the flag was set is caught by
comparing the parent pid. Elsewhere the flag is skipped and dev's next start finds the orphans instead.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    parent, command = int(argv[0]), argv[1:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # dev died before the flag was set: nobody would stop this child
            sys.exit(1)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
