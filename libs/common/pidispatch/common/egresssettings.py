"""The egress settings (``PI_EGRESS``, ``PI_EGRESS_ALLOWLIST``, ``PD_EGRESS_IMAGE``, ``PD_EGRESS_SUBNETS``):
whether each job sits on its own internal network whose only way out is the filtering proxy, which hosts
that proxy lets through, and where those networks take their addresses.

Read with the rest of the configuration (``load_settings``): the allowlist file is read and checked once,
at start, and a bad line exits 2 naming the file, the line and what is accepted.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping

import msgspec

from pidispatch.common.configsyntax import checked_image
from pidispatch.common.errors import ConfigError

DEFAULT_IMAGE = "pi-egress:latest"
# Where job networks take their /29s: RFC 2544's benchmarking range, rarely on a LAN. The host gets no
# address on a job network (inhibit_ipv4), so an overlap could only matter inside the proxy.
DEFAULT_SUBNETS = "198.18.0.0/15"
JOB_PREFIX_LEN = 29
ENTRY_LIMIT = 1000
# A hostname (a leading dot: it and every subdomain) or an IPv4/IPv6 literal, with an optional port.
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_NAME_RE = re.compile(rf"^\.?(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
ACCEPTED = "one host a line: name, .name (it and its subdomains) or an IP address, each optionally :port"


class Destination(msgspec.Struct, frozen=True):
    """One allowed destination: ``host`` is a name (``.name`` for subdomains too) or an IP literal."""

    host: str
    port: int | None = None

    @property
    def is_ip(self) -> bool:
        return _is_ip(self.host)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


class EgressSettings(msgspec.Struct, frozen=True, kw_only=True):
    # On unless PI_EGRESS=0: a job reaches only the allowlist, through the proxy.
    enabled: bool = True
    # The operator's PI_EGRESS_ALLOWLIST entries; the worker adds what each job needs (forge, model).
    allowlist: tuple[Destination, ...] = ()
    image: str = DEFAULT_IMAGE
    # Job networks are /29s of this range, chosen by the worker: Docker's own pools give ~30 networks.
    subnets: str = DEFAULT_SUBNETS


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_destination(text: str) -> Destination | None:
    """Pure: ``host``, ``.host``, ``1.2.3.4``, ``[::1]``, each with an optional ``:port``; None if not one."""
    text = text.strip().lower()
    port: int | None = None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, None
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            return None
        port = int(port_text)
    if _is_ip(host):
        return Destination(str(ipaddress.ip_address(host)), port)
    if not _NAME_RE.match(host):
        return None
    return Destination(host, port)


def parse_allowlist(path: str, text: str) -> tuple[Destination, ...]:
    """Pure: the file's entries; blank lines and ``#`` comments are skipped. Raises ``ConfigError`` naming
    the first bad line."""
    found: list[Destination] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        entry = parse_destination(line)
        if entry is None:
            raise ConfigError(
                f"PI_EGRESS_ALLOWLIST {path}:{number}: {line[:80]!r} is refused; accepted: {ACCEPTED}")
        if entry not in found:
            found.append(entry)
    if len(found) > ENTRY_LIMIT:
        raise ConfigError(
            f"PI_EGRESS_ALLOWLIST {path} has {len(found)} entries; accepted: at most {ENTRY_LIMIT}")
    return tuple(found)


def load_egress_settings(env: Mapping[str, str]) -> EgressSettings:
    raw = (env.get("PI_EGRESS") or "").strip()
    if raw not in ("", "0", "1"):
        raise ConfigError(f"PI_EGRESS={raw[:20]!r} is refused; accepted: 1 (the default: jobs reach only the "
                          "allowlist, through the proxy) or 0 (jobs on Docker's bridge, the network open)")
    path = (env.get("PI_EGRESS_ALLOWLIST") or "").strip() or None
    entries: tuple[Destination, ...] = ()
    if path is not None:
        path = os.path.expanduser(path)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read(1_000_000)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"PI_EGRESS_ALLOWLIST {path} cannot be read ({type(exc).__name__}); "
                              f"accepted: a readable UTF-8 file, {ACCEPTED}") from None
        entries = parse_allowlist(path, text)
    image = checked_image((env.get("PD_EGRESS_IMAGE") or "").strip() or DEFAULT_IMAGE)
    return EgressSettings(enabled=raw != "0", allowlist=entries, image=image,
                          subnets=_subnets(env.get("PD_EGRESS_SUBNETS")))


def _subnets(raw: str | None) -> str:
    text = (raw or "").strip() or DEFAULT_SUBNETS
    try:
        net = ipaddress.IPv4Network(text, strict=True)
    except ValueError:
        net = None
    if net is None or net.prefixlen > JOB_PREFIX_LEN - 4:
        raise ConfigError(f"PD_EGRESS_SUBNETS={text[:40]!r} is refused; accepted: an IPv4 network of 16 /29s "
                          f"or more, like {DEFAULT_SUBNETS}")
    return str(net)
