"""This router's consumer name in the ``router`` group of ``pd:events``.

``PD_ROUTER_NAME`` if set, else ``router-<hostname>``. The name is stable so a restarted router re-reads
its own pending entries first; two routers on one host must be given distinct names, or they share one
pending list (still safe, but each re-processes the other's in-flight entries).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping

from pidispatch.common.errors import ConfigError

CONSUMER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def consumer_name(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    declared = (env.get("PD_ROUTER_NAME") or "").strip()
    if declared:
        if not CONSUMER_RE.match(declared):
            raise ConfigError(
                f"PD_ROUTER_NAME={declared!r} is refused; accepted: 1-64 of [A-Za-z0-9._-], "
                "starting with a letter or digit"
            )
        return declared
    host = re.sub(r"[^A-Za-z0-9._-]", "", socket.gethostname())[:56]
    return f"router-{host or 'localhost'}"
