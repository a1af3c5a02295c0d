"""Which host a worker hands a job it cannot serve to."""

from __future__ import annotations

from pidispatch.common.registry import ROUTE_FRESH_MS, HostRow
from pidispatch.worker.forward import forward_target


def host(name: str, caps: set[str], *, routes: bool = True, stale_ms: int | None = 0) -> HostRow:
    return HostRow(name=name, beat_at=0, started_at=None, version="", routes=routes, caps=frozenset(caps),
                   concurrency=None, running=None, tz="", image="", stale_ms=stale_ms)


def test_a_job_this_host_can_serve_or_that_needs_nothing_stays() -> None:
    hosts = [host("a", {"s:prod"})]
    assert forward_target([], frozenset(), hosts, "j", "me") is None
    assert forward_target(["s:prod"], frozenset({"s:prod"}), hosts, "j", "me") is None


def test_only_live_routable_capable_peers_are_candidates() -> None:
    hosts = [
        host("me", {"s:prod"}), host("stale", {"s:prod"}, stale_ms=ROUTE_FRESH_MS + 1),
        host("undated", {"s:prod"}, stale_ms=None), host("closed", {"s:prod"}, routes=False),
        host("other", {"s:dev"}), host("good", {"s:prod", "s:dev"}),
    ]
    assert {forward_target(["s:prod"], frozenset(), hosts, f"j{i}", "me") for i in range(50)} == {"good"}
    assert forward_target(["s:prod"], frozenset(), hosts[:5], "j", "me") is None


def test_even_when_every_live_host_can_serve_it_the_job_moves_and_the_choice_is_stable() -> None:
    # Unlike routing at enqueue, "everyone can" is no reason to keep a job this host cannot run.
    hosts = [host("b", {"s:prod"}), host("a", {"s:prod"})]
    chosen = forward_target(["s:prod"], frozenset(), hosts, "job-1", "me")
    assert chosen in {"a", "b"}
    assert forward_target(["s:prod"], frozenset(), list(reversed(hosts)), "job-1", "me") == chosen
