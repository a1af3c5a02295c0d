from __future__ import annotations

import re

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.common.settings import load_settings


def test_defaults_match_the_design() -> None:
    s = load_settings({})
    assert s.redis_url == "redis://127.0.0.1:6379/0"
    assert s.key_prefix == "pd"
    assert s.receiver_port == 3000
    assert s.concurrency == 3
    assert s.job_user == "1000:1000"
    assert s.job_timeout_s == 1800
    assert s.worker_name_declared is False


def test_valkey_url_is_an_alias_and_redis_url_wins() -> None:
    assert load_settings({"VALKEY_URL": "redis://v:1/0"}).redis_url == "redis://v:1/0"
    assert load_settings({"VALKEY_URL": "redis://v:1/0", "REDIS_URL": "redis://r:2/0"}).redis_url == (
        "redis://r:2/0"
    )


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"PI_CONCURRENCY": "0"}, "PI_CONCURRENCY"),
        ({"PI_CONCURRENCY": "three"}, "PI_CONCURRENCY"),
        ({"RECEIVER_PORT": "70000"}, "RECEIVER_PORT"),
        ({"PD_KEY_PREFIX": "a b"}, "PD_KEY_PREFIX"),
        ({"REDIS_URL": "http://x"}, "REDIS_URL"),
        ({"PI_JOB_USER": "0:0"}, "PI_JOB_USER"),
        ({"PI_JOB_USER": "1000"}, "PI_JOB_USER"),
        ({"PI_JOB_USER": "1000:0"}, "PI_JOB_USER"),
        ({"PI_WORKER_NAME": "-bad"}, "PI_WORKER_NAME"),
        ({"PI_WORKER_NAME": "host.json"}, "PI_WORKER_NAME"),
        ({"PI_JOB_MEMORY": "lots"}, "PI_JOB_MEMORY"),
        ({"PI_JOB_MEMORY": "1m"}, "PI_JOB_MEMORY"),
        ({"PI_JOB_CPUS": "0"}, "PI_JOB_CPUS"),
        ({"PI_JOB_IMAGE": "--privileged"}, "PI_JOB_IMAGE"),
        ({"GITHUB_AUTH_SOURCE": "token"}, "GITHUB_AUTH_SOURCE"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env)
    message = str(info.value)
    assert message.startswith(names)
    assert "\n" not in message


def test_sizes_parse() -> None:
    s = load_settings({"PI_JOB_MEMORY": "512m", "PI_JOB_CPUS": "1.5"})
    assert s.job_memory_bytes == 512 * 1024**2
    assert s.job_nano_cpus == 1_500_000_000


def test_declared_worker_name() -> None:
    s = load_settings({"PI_WORKER_NAME": "mini-1"})
    assert (s.worker_name, s.worker_name_declared) == ("mini-1", True)


def test_settings_are_frozen() -> None:
    s = load_settings({})
    with pytest.raises(AttributeError):
        s.concurrency = 5  # type: ignore[misc]


def test_metrics_port_unset_means_no_endpoint() -> None:
    assert load_settings({}).metrics_port is None
    assert load_settings({"PD_METRICS_PORT": " "}).metrics_port is None
    assert load_settings({"PD_METRICS_PORT": "9100"}).metrics_port == 9100


@pytest.mark.parametrize("value", ["0", "x", "70000", "-1"])
def test_a_bad_metrics_port_names_the_variable_and_the_range(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"PD_METRICS_PORT": value})
    assert str(info.value).startswith("PD_METRICS_PORT=")
    assert "accepted: 1..65535" in str(info.value)


def test_sentinels_make_one_replica_hold_each_write_by_default() -> None:
    s = load_settings({"REDIS_SENTINELS": "10.0.0.1:26379, [::1]:26380,10.0.0.1:26379"})
    assert s.redis_sentinels == (("10.0.0.1", 26379), ("::1", 26380))
    assert (s.redis_sentinel_master, s.replica_acks, s.replica_ack_timeout_ms) == ("pi-dispatch", 1, 250)
    assert load_settings({}).replica_acks == 0
    assert load_settings({"REDIS_SENTINELS": "a:1", "PD_REPLICA_ACKS": "0"}).replica_acks == 0


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"REDIS_SENTINELS": "host-without-port"}, "REDIS_SENTINELS entry 'host-without-port'"),
        ({"REDIS_SENTINELS": "a:1,b:0"}, "REDIS_SENTINELS entry 'b:0'"),
        ({"REDIS_SENTINELS": "user@a:1"}, "REDIS_SENTINELS entry 'user@a:1'"),
        ({"REDIS_SENTINEL_MASTER": "my master"}, "REDIS_SENTINEL_MASTER='my master'"),
        ({"PD_REPLICA_ACKS": "-1"}, "PD_REPLICA_ACKS"),
        ({"PD_REPLICA_ACK_TIMEOUT_MS": "5"}, "PD_REPLICA_ACK_TIMEOUT_MS"),
    ],
)
def test_bad_sentinel_settings_name_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_settings(env)


def test_a_socket_url_beside_sentinels_is_refused() -> None:
    with pytest.raises(ConfigError, match="REDIS_URL is a unix:// socket and REDIS_SENTINELS is set"):
        load_settings({"REDIS_SENTINELS": "s:26379", "REDIS_URL": "unix:///run/redis.sock"})
