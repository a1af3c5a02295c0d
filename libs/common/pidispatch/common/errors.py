"""The two failure classes every entry point maps to an exit code."""

from __future__ import annotations


class ConfigError(Exception):
    """A configuration the operator must fix; the process exits 2 so supervisors do not restart it.

    The message is one line that names the variable or file and what would be accepted.
    """

    exit_code = 2


class InfraError(Exception):
    """Something outside the project is unavailable (Redis, Docker); exit 1, a restart may help."""

    exit_code = 1
