"""Pure: what a job may reach with egress on, and the proxy rules and job environment that say so.

A job reaches the operator's allowlist (``PI_EGRESS_ALLOWLIST``) plus what it needs to do its work: the
configured forges' API and git hosts, and its model provider (``PI_MODEL_BASE_URL`` when set, else the
provider's public endpoint). Everything else is refused by the proxy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from pidispatch.common.egresssettings import Destination, parse_destination
from pidispatch.common.settings import Settings

PROXY_PORT = 3128
PROXY_PREFIX = "pd-egress-"
# The label that tells the egress proxy and the job networks apart from job containers (pd.job).
LABEL_ROLE = "pd.role"
# The public endpoint of each provider pi knows (keys in common.envnames.PROVIDER_KEY_VARS).
PROVIDER_HOSTS: Mapping[str, tuple[str, ...]] = {
    "anthropic": ("api.anthropic.com",),
    "openai": ("api.openai.com",),
    "google": ("generativelanguage.googleapis.com",),
    "groq": ("api.groq.com",),
    "cerebras": ("api.cerebras.ai",),
    "xai": ("api.x.ai",),
    "openrouter": ("openrouter.ai",),
    "zai": ("api.z.ai",),
    "mistral": ("api.mistral.ai",),
    "deepseek": ("api.deepseek.com",),
}


def url_destination(url: str) -> Destination | None:
    """A URL's host, with its port only when the URL names one (a name alone allows any port)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    return parse_destination(host if port is None else f"{host}:{port}")


def providers(settings: Settings) -> tuple[str, ...]:
    """The providers this deployment's jobs use: ``PI_PROVIDER`` and those ``PI_ALLOWED_MODELS`` names."""
    named = [settings.provider, *(ref.split("/", 1)[0] for ref in settings.allowed_models)]
    return tuple(dict.fromkeys(named))


def unreachable_providers(settings: Settings) -> tuple[str, ...]:
    """Providers with no known endpoint and no ``PI_MODEL_BASE_URL``: named at start, as their jobs would
    be refused by the proxy unless the allowlist file names their host."""
    if settings.model_base_url is not None:
        return ()
    return tuple(p for p in providers(settings) if p not in PROVIDER_HOSTS)


def destinations(settings: Settings, forge_urls: Iterable[str]) -> tuple[Destination, ...]:
    """Everything a job may reach, deduplicated in a stable order."""
    found: list[Destination] = list(settings.egress.allowlist)
    urls = list(forge_urls)
    if settings.model_base_url is not None:
        urls.append(settings.model_base_url)
    else:
        urls.extend(f"https://{host}" for p in providers(settings) for host in PROVIDER_HOSTS.get(p, ()))
    for url in urls:
        dest = url_destination(url)
        if dest is not None and dest not in found:
            found.append(dest)
    return tuple(found)


def squid_rules(dests: Iterable[Destination]) -> str:
    """The proxy's allow rules, one ``acl`` and ``http_access allow`` per destination (the image denies
    everything after them). Every value was checked by ``parse_destination``: nothing else reaches here.

    ``-n``: an address rule never resolves a requested name, nor a name rule a requested address, so a
    refusal never waits on DNS (without it a refused name took 35 s where DNS does not answer)."""
    lines: list[str] = []
    for n, dest in enumerate(dests, 1):
        acl = f"pd_allow_{n}"
        kind = "dst" if dest.is_ip else "dstdomain"
        lines.append(f"acl {acl} {kind} -n {dest.host}")
        if dest.port is None:
            lines.append(f"http_access allow {acl}")
        else:
            lines.append(f"acl {acl}_port port {dest.port}")
            lines.append(f"http_access allow {acl} {acl}_port")
    return "\n".join(lines)


def proxy_name(host: str, instance: str, rules: str, image: str) -> str:
    """This host's proxy container in this deployment: a change of its rules or image starts a new one (the
    boot reaper removes the old one once no job network holds it). Per host and deployment, so a worker
    only ever touches its own."""
    digest = hashlib.sha256(f"{instance}\n{image}\n{rules}".encode()).hexdigest()[:12]
    return f"{PROXY_PREFIX}{host}-{digest}"


def job_env(proxy: str) -> dict[str, str]:
    """The variables that send a job's HTTP(S) through the proxy: both cases (curl and git read the lower,
    most tools the upper), and Node's own switch for runtimes that honour it."""
    url = f"http://{proxy}:{PROXY_PORT}"
    local = "localhost,127.0.0.1,::1"
    return {
        "HTTPS_PROXY": url, "HTTP_PROXY": url, "https_proxy": url, "http_proxy": url,
        "NO_PROXY": local, "no_proxy": local, "NODE_USE_ENV_PROXY": "1",
    }
