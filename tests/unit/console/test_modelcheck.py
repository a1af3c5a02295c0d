from __future__ import annotations

from pidispatch.common.settings import load_settings_by_part
from pidispatch.console import diagnosis as dx
from pidispatch.console.modelcheck import model_url

PI = dict(image="pi-job:latest", has_pi=True, provider="anthropic", url="https://api.anthropic.com",
          key_vars=("ANTHROPIC_OAUTH_TOKEN", "ANTHROPIC_API_KEY"))


def test_the_url_is_the_base_url_else_the_providers_endpoint() -> None:
    assert model_url(load_settings_by_part({})[0]) == "https://api.anthropic.com"
    assert model_url(load_settings_by_part({"PI_MODEL_BASE_URL": "http://10.0.0.5:8000/v1"})[0]) == \
        "http://10.0.0.5:8000/v1"
    assert model_url(load_settings_by_part({"PI_PROVIDER": "nobody-knows"})[0]) is None


def test_an_image_without_pi_needs_no_model() -> None:
    assert dx.model_check(dx.ModelPath("pi-dispatch-demo:latest", False, "anthropic", None)).status == dx.OK


def test_reached_with_a_key_is_ok_and_without_one_warns() -> None:
    assert dx.model_check(dx.ModelPath(**PI, key_set=True, status=404)).status == dx.OK
    warned = dx.model_check(dx.ModelPath(**PI, status=404))
    assert warned.status == dx.WARN and "ANTHROPIC_API_KEY" in warned.fix


def test_unreached_fails_naming_the_fix() -> None:
    base = {**PI, "key_set": True, "error": "ECONNREFUSED"}
    failed = dx.model_check(dx.ModelPath(**base))
    assert failed.status == dx.FAIL and "ECONNREFUSED" in failed.finding and "firewall" in failed.fix
    loop = dx.model_check(dx.ModelPath(**{**base, "url": "http://127.0.0.1:8000/v1"}))
    assert "loopback" in loop.fix
    standin = {**base, "url": "http://172.17.0.1:4000/v1", "dev_standin": True}
    beside_dev = dx.model_check(dx.ModelPath(**standin))
    assert beside_dev.status == dx.FAIL and "start it again" in beside_dev.fix


def test_no_known_endpoint_fails() -> None:
    check = dx.model_check(dx.ModelPath("pi-job:latest", True, "nobody-knows", None))
    assert check.status == dx.FAIL and "PI_MODEL_BASE_URL" in check.fix
