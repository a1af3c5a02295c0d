"""The per-job dollar cap: read exactly, combined so a trigger may only lower the deployment's, and
passed to the container as PI_MAX_COST_MICROS."""

from __future__ import annotations

import pytest

from pidispatch.common.dollars import lower_cap, usd_micros
from pidispatch.common.errors import ConfigError
from pidispatch.common.models import Job
from pidispatch.common.outcome import JobConfigRefused, JobRefusal
from pidispatch.common.settings import load_settings
from pidispatch.worker.engine.environment import container_env, effective_cost_micros
from pidispatch.worker.engine.preflight import ImageFacts, image_refusal

REFUSED = ["0", "-1", "1.0000001", "1e3", "abc", "1000000.01", "0.0000001", "01", "1.", ".5", "+1", "1,5"]


def job(max_cost_usd: str | float | None = None) -> Job:
    return Job(id="local-1", kind="local", repo="local:app", flow="fix", folder="/srv/app", task="t",
               max_cost_usd=max_cost_usd)


@pytest.mark.parametrize(
    ("text", "micros"),
    [("0.000001", 1), ("1000000", 10**12), ("0.1", 100_000), ("0.30", 300_000), ("2.5", 2_500_000),
     ("999999.999999", 999_999_999_999)],
)
def test_an_amount_becomes_exact_micro_dollars(text: str, micros: int) -> None:
    assert usd_micros(text) == micros
    assert load_settings({"PI_MAX_COST_USD": text}).max_cost_micros == micros


@pytest.mark.parametrize("text", REFUSED)
def test_pi_max_cost_usd_refuses_what_is_not_a_plain_amount_in_range(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"PI_MAX_COST_USD": text})
    message = str(info.value)
    assert message.startswith("PI_MAX_COST_USD=") and "accepted: a dollar amount above 0" in message
    assert "\n" not in message


def test_unset_or_blank_is_no_deployment_cap() -> None:
    assert load_settings({}).max_cost_micros is None
    assert load_settings({"PI_MAX_COST_USD": "  "}).max_cost_micros is None


def test_a_job_cap_may_only_lower_the_deployment_cap() -> None:
    assert lower_cap(None, None) is None
    assert lower_cap(5_000_000, None) == 5_000_000
    assert lower_cap(None, 7) == 7
    assert lower_cap(5_000_000, 500_000) == 500_000
    assert lower_cap(500_000, 5_000_000) == 500_000  # a trigger asking for more gets the deployment's


@pytest.mark.parametrize(
    ("deployment", "trigger", "micros"),
    [(None, None, None), ("2", None, 2_000_000), (None, "0.50", 500_000), ("2", "0.50", 500_000),
     ("0.50", "2", 500_000), ("1", 0.1, 100_000), ("3", 2, 2_000_000)],
)
def test_the_effective_cap_combines_both_sources(
    deployment: str | None, trigger: str | float | None, micros: int | None
) -> None:
    s = load_settings({} if deployment is None else {"PI_MAX_COST_USD": deployment})
    assert effective_cost_micros(job(trigger), s) == micros
    env = container_env(job(trigger), name="pi-job-1", settings=s, host_env={}, secrets={})
    assert env.get("PI_MAX_COST_MICROS") == (None if micros is None else str(micros))


def test_a_job_cap_the_worker_cannot_read_refuses_the_job_rather_than_run_it_uncapped() -> None:
    for bad in ("0", "abc", 1e-7):
        with pytest.raises(JobConfigRefused):
            container_env(job(bad), name="pi-job-1", settings=load_settings({}), host_env={}, secrets={})


def test_no_forwarded_variable_or_secret_can_set_or_raise_the_cap() -> None:
    s = load_settings({"PI_MAX_COST_USD": "1"})
    env = container_env(job(), name="pi-job-1", settings=s, host_env={}, secrets={"PI_MAX_COST_MICROS": "9"})
    assert env["PI_MAX_COST_MICROS"] == "1000000"
    env = container_env(job(), name="pi-job-1", settings=load_settings({}), host_env={},
                        secrets={"PI_MAX_COST_MICROS": "9"})
    assert "PI_MAX_COST_MICROS" not in env


def test_the_deployment_cap_alone_needs_an_image_with_the_cost_cap_capability() -> None:
    plain = ImageFacts("sha256:x", None, None, ("anyUid",))
    capable = ImageFacts("sha256:x", None, None, ("anyUid", "costCap"))
    capped = load_settings({"PI_MAX_COST_USD": "5"})
    assert image_refusal(plain, job(), capped) == JobRefusal("job-image-cost-cap-unsupported")
    assert image_refusal(capable, job(), capped) is None
    assert image_refusal(plain, job(), load_settings({})) is None
