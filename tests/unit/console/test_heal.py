"""pidispatch.console.heal: what ``pi-dispatch heal`` prints, and doctor's verdict on the delivery logs."""

from __future__ import annotations

import json

from pidispatch.common.healsettings import HealSettings
from pidispatch.console import diagnosis as dx
from pidispatch.console.heal import heal_check, render, report_json
from pidispatch.router.heal import HealReport, HealRow, SourceReport

ROW = HealRow("acme/app:12", "0b989ba4-242f-11e5-81e1-c7b6966d2516", "issues", "labeled",
              "2026-12-01T10:00:00.000Z", 0)


def _report(dry_run: bool = False, error: str | None = None) -> HealReport:
    part = SourceReport(source="acme/app:12", read=40, missing=3, asked=1, before=2, error=error)
    return HealReport(dry_run=dry_run, window_h=24, sources=[part], rows=[ROW])


def test_the_pass_reads_as_a_line_per_log_then_a_row_per_delivery_asked_for() -> None:
    text = render(_report())
    assert text.splitlines()[0] == ("acme/app:12: 40 attempts in the last 24 h, 3 never stored, asked 1, "
                                    "asked before 2")
    assert "SOURCE       DELIVERY" in text and "issues/labeled  2026-12-01T10:00:00.000Z  0" in text
    assert "would ask 1" in render(_report(dry_run=True))
    assert render(_report(error="rate-limited")).splitlines()[0].endswith("; stopped: rate-limited")


def test_the_json_names_every_count_and_delivery() -> None:
    out = json.loads(json.dumps(report_json(_report(dry_run=True))))
    assert out["dryRun"] and out["windowHours"] == 24 and out["asked"] == 1
    assert out["sources"][0] == {"source": "acme/app:12", "read": 40, "missing": 3, "asked": 1, "before": 2,
                                 "gone": 0, "error": None}
    assert out["deliveries"][0]["guid"] == ROW.guid


def test_doctor_says_whether_the_credentials_can_read_the_logs() -> None:
    on, off = HealSettings(interval_s=600), HealSettings()
    assert heal_check(off, {}).status == dx.OK
    assert heal_check(on, {}).status == dx.FAIL
    readable = heal_check(on, {"app": None, "acme/app:12": None})
    assert readable.status == dx.OK and "readable: app, acme/app:12" in readable.finding
    assert readable.finding.startswith("healing every 600 s, 24 h back")
    refused = heal_check(on, {"app": None, "acme/app:12": "status-404"})
    assert refused.status == dx.FAIL and "cannot read acme/app:12 (status-404)" in refused.finding
    assert refused.fix
    assert heal_check(off, {"acme/app:12": "credentials"}).status == dx.WARN
    assert heal_check(on, {}, "GITHUB_HEAL_HOOKS refused").finding == "skipped: GITHUB_HEAL_HOOKS refused"


async def test_doctors_row_is_skipped_when_its_variables_are_refused() -> None:
    from pidispatch.common.settings import load_settings
    from pidispatch.console.heal import doctor_check
    from pidispatch.forges.config import load_forge_config

    settings, config = load_settings({}), load_forge_config({})
    skipped = await doctor_check(settings, config, 1.0, {"heal": "PD_HEAL_WINDOW_H=99 ..."}, {})
    assert skipped.status == dx.FAIL and skipped.finding.startswith("skipped: PD_HEAL_INTERVAL_S")
    assert (await doctor_check(settings, config, 1.0, {}, {"github": "GITHUB_HEAL_HOOKS ..."})).finding == (
        "skipped: a GitHub variable is refused (config)")
    assert (await doctor_check(settings, config, 1.0)).status == dx.OK  # off, no log: nothing to probe


async def test_the_probe_reads_one_page_of_each_log_and_names_what_it_could_not() -> None:
    from pidispatch.console.heal import probe_logs
    from pidispatch.forges.config import load_forge_config
    from tests.support.deliverylog import hook_log, register_delivery_log
    from tests.support.forges import PAT, github_forge

    forge = github_forge()
    register_delivery_log(forge)
    async with forge:
        forge.state["delivery_logs"][hook_log("acme/app", 1)] = []
        env = {"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": PAT, "GITHUB_API_URL": forge.url,
               "GITHUB_HEAL_HOOKS": "acme/app:1,acme/app:2"}
        config = load_forge_config(env)
        assert await probe_logs(config, 5.0) == {"acme/app:1": None, "acme/app:2": "status-404"}
