"""What one forge is to pi-dispatch: its constants, and where each service finds the rest.

A forge package (``pidispatch.forges.<name>``) builds one ``Forge``. Its constants are read by every
service; the parts that hold code are loaded only by the service that runs them, so the receiver never
imports the router's matchers nor the worker's API client: ``receiver()``, ``router()`` and ``worker()``
import ``<package>.receive``, ``.route`` and ``.api`` on first use (each module annotates its part with
the service's protocol, so mypy checks it there). The accessors live beside the protocols, so this
module imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import import_module
from typing import Any


@cache
def _part(package: str, module: str, attribute: str) -> Any:
    return getattr(import_module(f"{package}.{module}"), attribute)


@dataclass(frozen=True, kw_only=True, slots=True)
class Forge:
    name: str  # the forge's kind in jobs, rules, streams and logs
    display: str  # for people
    package: str  # the Python package that holds this forge's parts
    path: str  # the receiver path its webhooks arrive on
    fallthrough: bool = False  # the receiver forge for every path no other forge claims
    job_id_prefix: str
    # Its pull requests number apart from issues, so a PR reference uses "!" rather than "#".
    bang_pr: bool = False
    git_username: str  # offered to git with a minted token as the password
    # Every variable its config and receive parts read (below the forges, common.envnames.FORGE_SETTINGS_VARS
    # lists their union for the start-up check; a test holds the two equal).
    settings_vars: tuple[str, ...]
    # Those of them that hold a credential (common.envnames.FORGE_SECRET_VARS lists their union): never
    # forwarded into a job (PI_FORWARD_ENV).
    secret_vars: tuple[str, ...]
    webhook_secret_var: str  # its webhook secret; the rotation partner is the same name + _PREVIOUS
    token_vars: tuple[str, ...]  # every container variable that carries the job's minted token
    credentials_hint: str  # what an operator sets to give it API credentials
    self_id_var: str  # the variable(s) that name the harness's own account there, skipping the lookup
    identity_hint: str  # what to check when resolving that account fails
    # Every firing delivery needs an API lookup (GitHub only for close rules).
    lookup_always: bool = False
    lookup_failed_event: str  # log event when its authority lookup cannot be answered
    pr_actions: frozenset[str]  # the rule action words its pull request rules accept
    pr_close_word: str | None = None  # the PR action that means closed, where PR close rules exist
    pr_label_action: str | None = None  # the PR action that means "a label was added", where one exists
    issue_actions: frozenset[str] | None = None  # None: no issue rules on this forge

    def part(self, module: str, attribute: str) -> Any:
        """``<package>.<module>.<attribute>``, imported on first use; typed by the accessor beside each
        service's protocol (``receive.receive_of``, ``route.route_of``, ``api.api_of``)."""
        return _part(self.package, module, attribute)
