"""``pi-dispatch doctor``'s verdicts: every pure check, ok, warn and fail; the exit code; the text form;
and the group-by-group configuration readers that keep one bad variable from hiding the rest."""

from __future__ import annotations

import pytest

from pidispatch.common.settings import load_settings_by_part
from pidispatch.console import diagnosis as dx
from pidispatch.console.diagnosis import FAIL, OK, WARN, Check
from pidispatch.console.doctor import render
from pidispatch.forges.config import load_forge_config_by_forge
from pidispatch.worker.engine.preflight import ImageFacts

GOOD_IMAGE = ImageFacts("sha256:1", "0.73.1", None, ("anyUid", "costCap"))


def test_exit_code_is_the_worst_status() -> None:
    assert dx.exit_code([]) == 0
    assert dx.exit_code([Check("a", OK, "x")]) == 0
    assert dx.exit_code([Check("a", OK, "x"), Check("b", WARN, "y")]) == 1
    assert dx.exit_code([Check("a", WARN, "x"), Check("b", FAIL, "y"), Check("c", OK, "z")]) == 2


def test_config() -> None:
    assert dx.config_check({}).status == OK
    one = dx.config_check({"spend": "PI_DAILY_CAP='x' is not an integer"})
    assert one.status == FAIL and one.finding == "PI_DAILY_CAP='x' is not an integer" and one.fix
    two = dx.config_check({"spend": "A", "github": "B"})
    assert two.finding == "A (and 1 more)"


def test_redis() -> None:
    good = dx.RedisFacts(appendonly="yes", save="", policy="noeviction")
    assert dx.redis_check(None, good).status == OK
    assert "AOF" in dx.redis_check(None, good).finding
    rdb = dx.RedisFacts(appendonly="no", save="3600 1", policy="noeviction")
    assert dx.redis_check(None, rdb).status == OK and "RDB" in dx.redis_check(None, rdb).finding
    none = dx.redis_check(None, dx.RedisFacts(appendonly="no", save="", policy="noeviction"))
    assert none.status == WARN and "no persistence" in none.finding
    evicting = dx.redis_check(None, dx.RedisFacts(appendonly="yes", save="", policy="allkeys-lru"))
    assert evicting.status == FAIL and "allkeys-lru" in evicting.finding and "noeviction" in evicting.fix
    hidden = dx.redis_check(None, None)
    assert hidden.status == WARN and "cannot read CONFIG" in hidden.finding
    down = dx.redis_check("did not answer within 5 s", None)
    assert down.status == FAIL and down.finding == "did not answer within 5 s"


def test_streams() -> None:
    assert dx.streams_check([]).status == OK
    missing = dx.streams_check([("pd:events", "router")])
    assert missing.status == WARN and "router on pd:events" in missing.finding and missing.fix


def test_docker() -> None:
    assert dx.docker_check(None, "overlay2").status == OK
    assert dx.docker_check(None, "vfs").status == WARN
    assert dx.docker_check("unreachable (ClientConnectorError)", None).status == FAIL


def test_job_image() -> None:
    assert dx.image_check("pi-job:latest", GOOD_IMAGE, ["github"]).status == OK
    missing = dx.image_check("pd-nope:latest", None, [])
    assert missing.status == FAIL and "pi-dispatch job-image build" in missing.fix
    no_uid = dx.image_check("x", ImageFacts("i", None, None, ()), [])
    assert no_uid.status == FAIL and "anyUid" in no_uid.finding
    narrow = dx.image_check("x", ImageFacts("i", "1", ("gitlab",), ("anyUid",)), ["github", "gitlab"])
    assert narrow.status == WARN and "refuses jobs of github" in narrow.finding


def test_triggers() -> None:
    assert dx.triggers_check(None, 3, ()).status == OK
    assert dx.triggers_check(None, 1, ()).finding == "1 rule, none disarmed"
    spent = dx.triggers_check(None, 3, (1,))
    assert spent.status == WARN and "triggers[1]" in spent.finding
    bad = dx.triggers_check("PI_TRIGGERS_FILE t.json: boom", 0, ())
    assert bad.status == FAIL and bad.finding.startswith("PI_TRIGGERS_FILE")


def test_disarmed_indexes() -> None:
    data = {"triggers": [{"on": {"type": "issue"}}, {"on": {"type": "issue", "disarmed": {"at": "x"}}}, 3]}
    assert dx.disarmed_indexes(data) == [1]
    assert dx.disarmed_indexes([]) == []


def test_forge() -> None:
    assert dx.forge_check("gitlab", dx.ForgeProbe()).status == OK
    assert dx.forge_check("github", dx.ForgeProbe(scopes="repo, read:org")).status == OK
    narrow = dx.forge_check("github", dx.ForgeProbe(scopes="read:user"))
    assert narrow.status == WARN and "lack repo" in narrow.finding
    assert dx.forge_check("github", dx.ForgeProbe(scopes="")).status == WARN
    refused = dx.forge_check("forgejo", dx.ForgeProbe(error="GET /user answered 401"), "FORGEJO_TOKEN")
    assert refused.name == "forge:forgejo" and refused.status == FAIL and refused.fix == "check FORGEJO_TOKEN"


def test_webhook_secrets() -> None:
    assert dx.webhook_check({}).status == OK
    assert dx.webhook_check({"github": None}).status == OK
    missing = dx.webhook_check({"github": None, "gitlab": "GITLAB_WEBHOOK_SECRET not set"})
    assert missing.status == FAIL and "gitlab" in missing.finding and "github" not in missing.finding


@pytest.mark.parametrize(("used", "pct", "status"), [
    (3, None, OK), (9, None, OK), (10, None, WARN), (12, None, WARN), (7, 80, OK), (8, 80, WARN),
])
def test_budget_day_window(used: int, pct: int | None, status: str) -> None:
    assert dx.budget_check([dx.WindowUse("day", used, 10)], pct).status == status


def test_budget_token_cap_and_off_window() -> None:
    assert dx.budget_check([dx.WindowUse("day", 0, 10), dx.WindowUse("tokens", 99, 100)], 50).status == OK
    full = dx.budget_check([dx.WindowUse("day", 0, 10), dx.WindowUse("tokens", 100, 100)], None)
    assert full.status == WARN and "tokens window full" in full.finding
    assert dx.budget_check([dx.WindowUse("day", 0, 0)], None).status == WARN  # a cap of 0 runs nothing


@pytest.mark.parametrize(("skew", "status"), [(0.1, OK), (-2.0, OK), (2.5, WARN), (-31.0, FAIL)])
def test_clock(skew: float, status: str) -> None:
    assert dx.clock_check(skew).status == status


def test_hosts() -> None:
    empty = dx.hosts_check([])
    assert empty.status == WARN and "pi-dispatch worker" in empty.fix
    one = dx.hosts_check([dx.HostLoad("w1", 1, 3, ("gpu",)), dx.HostLoad("w2", None, None, ())])
    assert one.status == OK and one.finding == "2 live: w1 1/3 [gpu]; w2 ?/?"


def test_dead() -> None:
    assert dx.dead_check(0, "pd:dead").status == OK
    some = dx.dead_check(4, "pd:dead")
    assert some.status == WARN and "4 entries" in some.finding and "XRANGE pd:dead" in some.fix


def test_skipped_is_reported_not_omitted() -> None:
    c = dx.skipped("clock", "redis unreachable", "fix the redis check first")
    assert c.status == FAIL and c.finding == "skipped: redis unreachable"


def test_render_lists_fixes_only_for_checks_not_ok() -> None:
    text = render([Check("config", OK, "fine"), Check("redis", FAIL, "down", "start it")])
    lines = text.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "FINDING"]
    assert lines[1].startswith("config  ok") and "fix:" in lines and "  redis: start it" in lines
    assert "config:" not in text.split("fix:")[1]


def test_settings_by_part_keeps_going_past_a_bad_variable() -> None:
    settings, errors = load_settings_by_part({"PI_DAILY_CAP": "x", "REDIS_URL": "redis://h:1/0"})
    assert list(errors) == ["spend"] and "PI_DAILY_CAP" in errors["spend"]
    assert settings.redis_url == "redis://h:1/0" and settings.daily_cap == 25


def test_forge_config_by_forge_keeps_the_good_forges() -> None:
    config, errors = load_forge_config_by_forge({
        "GITLAB_URL": "http://127.0.0.1:9", "GITLAB_TOKEN": "t", "GITHUB_AUTH_SOURCE": "bogus",
    })
    assert "github" in errors and "gitlab" in config.configured_forges()


def test_egress_off_warns_a_missing_proxy_image_fails_and_on_says_how_much_a_job_reaches() -> None:
    off = dx.egress_check(False, "pi-egress:latest", None, 3)
    assert (off.status, off.fix) == (dx.WARN, "unset PI_EGRESS: each job then reaches only its allowlist, "
                                              "through the proxy")
    missing = dx.egress_check(True, "pi-egress:latest", False, 3)
    assert missing.status == dx.FAIL and "egress-proxy-missing" in missing.finding
    assert missing.fix.startswith("pi-dispatch egress-image build")
    on = dx.egress_check(True, "pi-egress:latest", True, 3)
    assert (on.status, on.finding) == (dx.OK, "on: jobs reach 3 destinations, through a proxy from "
                                             "pi-egress:latest")


@pytest.mark.parametrize(
    ("topology", "status", "says"),
    [
        (dx.Topology("master", 0, 0, 0), dx.OK, "no failover configured"),
        (dx.Topology("master", 1, 0, 1, sentinels=3), dx.OK, "acknowledged once 1 replica(s) hold it"),
        (dx.Topology("master", 1, 0, 0, sentinels=3), dx.WARN, "a failover can lose acknowledged deliveries"),
        (dx.Topology("master", 0, 0, 1, sentinels=3), dx.WARN, "each delivery waits, then is spooled"),
        (dx.Topology("master", 1, None, 1), dx.WARN, "no REDIS_SENTINELS"),
        (dx.Topology("master", 1, 1, 1, sentinels=2), dx.WARN, "a majority of 3 or more sentinels"),
        (dx.Topology("slave", 0, 0, 0), dx.FAIL, "is a slave: it refuses writes"),
        (dx.Topology("master", 0, 0, 1, sentinel_error="none answered"), dx.FAIL, "sentinels: none answered"),
    ],
)
def test_topology_warns_where_a_failover_could_lose_acknowledged_work(
    topology: dx.Topology, status: str, says: str
) -> None:
    check = dx.topology_check(topology)
    assert (check.status, says in check.finding) == (status, True), check
    assert check.status == dx.OK or check.fix


def test_each_service_is_judged_by_the_checks_it_needs() -> None:
    assert dx.in_scope("forge:github", frozenset({"router"})) and dx.in_scope("docker", frozenset({"worker"}))
    assert not dx.in_scope("docker", frozenset({"router", "receiver"}))
    assert not dx.in_scope("triggers", frozenset({"receiver"}))  # the receiver reads no rules
    assert dx.in_scope("webhook-secrets", frozenset({"receiver"}))
    assert not dx.in_scope("webhook-secrets", frozenset({"worker"}))  # the worker is given no secret


def test_a_receiver_without_rules_to_judge_by_needs_one_serving_arm() -> None:
    assert dx.arms_check({"github": None, "gitlab": "not set"}) == dx.ok("webhook-secrets", "serves github")
    none = dx.arms_check({"github": "not set", "gitlab": "not set"})
    assert (none.status, none.finding) == (FAIL, "no forge's webhook secret is set") and none.fix
    bad = dx.arms_check({"github": "WEBHOOK_SECRET is too short", "gitlab": "not set"})
    assert bad.finding == "WEBHOOK_SECRET is too short"
