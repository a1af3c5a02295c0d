"""The forge registry: one entry per forge, no two alike where they must differ, and every table and
config block that is keyed by forge covers every entry (adding a forge cannot leave one behind)."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest

from pidispatch import forges
from pidispatch.common import envnames
from pidispatch.common.envnames import RESERVED_SECRET_NAMES
from pidispatch.forges import FORGES, by_name, identity, names, pipeline
from pidispatch.forges.arms import FALLTHROUGH_FORGE, FORGE_PATHS
from pidispatch.forges.authority import FAILED_EVENT
from pidispatch.forges.config import FORGE_VARIABLES, ForgeConfig
from pidispatch.triggers.jobs import JOB_ID_PREFIX
from pidispatch.triggers.loader import FORGE_KINDS, PR_ACTIONS, parse_triggers
from pidispatch.worker.engine.environment import FORGE_TOKEN_VARS
from pidispatch.worker.ladder import GIT_USERNAMES
from tests.support.sources import ROOT


def unique(values: list[str]) -> bool:
    return len(values) == len(set(values))


def test_names_order_and_lookup() -> None:
    assert names() == ("github", "gitlab", "forgejo", "azure")
    assert all(by_name(f.name) is f for f in FORGES)
    assert forges.find("local") is None
    with pytest.raises(KeyError):
        by_name("local")


def test_what_tells_forges_apart_is_unique() -> None:
    assert unique([f.name for f in FORGES])
    assert unique([f.job_id_prefix for f in FORGES])
    assert unique([f.path for f in FORGES])
    assert unique([f.display for f in FORGES])
    assert unique([f.lookup_failed_event for f in FORGES])
    assert unique([v for f in FORGES for v in f.token_vars])
    assert [f.name for f in FORGES if f.fallthrough] == [FALLTHROUGH_FORGE]


def test_entries_are_well_formed() -> None:
    for f in FORGES:
        assert f.path == "/" + f.name
        assert f.job_id_prefix.endswith("-")
        assert f.token_vars and f.git_username and f.credentials_hint and f.identity_hint and f.self_id_var
        assert f.pr_actions
        # A close or label word the forge's own PR rules would refuse could never fire.
        assert f.pr_close_word is None or f.pr_close_word in f.pr_actions
        assert f.pr_label_action is None or f.pr_label_action in f.pr_actions
        assert set(f.token_vars) <= RESERVED_SECRET_NAMES


def test_the_variable_inventories_below_the_forges_are_every_forges_own() -> None:
    assert sorted(envnames.FORGE_TOKEN_VARS) == sorted(v for f in FORGES for v in f.token_vars)
    assert sorted(envnames.FORGE_SETTINGS_VARS) == sorted(v for f in FORGES for v in f.settings_vars)
    assert sorted(envnames.FORGE_SECRET_VARS) == sorted(v for f in FORGES for v in f.secret_vars)
    for f in FORGES:
        assert {f.webhook_secret_var, f"{f.webhook_secret_var}_PREVIOUS"} <= set(f.secret_vars)
        assert set(f.secret_vars) <= set(f.settings_vars)


def test_every_variable_a_forge_reads_is_in_its_settings_vars() -> None:
    for f in FORGES:
        folder = ROOT / "libs/common/pidispatch/forges" / f.name
        read = {m for p in ("config.py", "receive.py", "auth.py") if (folder / p).exists()
                for m in re.findall(r'"([A-Z][A-Z0-9_]{3,})"', (folder / p).read_text())}
        read -= {"POST", "RS256", *f.token_vars}
        assert read <= set(f.settings_vars), f.name


def test_every_table_covers_every_forge() -> None:
    every = set(names())
    tables: list[Mapping[str, object]] = [
        FORGE_TOKEN_VARS, FORGE_VARIABLES, JOB_ID_PREFIX, GIT_USERNAMES, FAILED_EVENT, identity.VARIABLES,
        PR_ACTIONS, pipeline.ARMS,
    ]
    for table in tables:
        assert set(table) == every
    assert names() == FORGE_KINDS
    assert set(FORGE_PATHS.values()) | {FALLTHROUGH_FORGE} == every


def test_every_config_block_is_named_after_its_forge() -> None:
    # ForgeConfig, Rules and ReceiverConfig are keyed by forge name, each forge's package reads its own.
    assert set(ForgeConfig().blocks) == set(names())
    assert set(parse_triggers('{"triggers": []}').groups) == set(names())

