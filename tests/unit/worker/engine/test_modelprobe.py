from __future__ import annotations

from pidispatch.worker.engine.modelprobe import ProbeResult, parse_output, probe_result


def test_any_http_answer_counts_as_reached() -> None:
    assert probe_result("pd-probe http 401\n", 0) == ProbeResult(status=401)
    assert probe_result("noise\npd-probe http 200\n", 0).reached


def test_no_answer_says_why() -> None:
    assert probe_result("pd-probe error ECONNREFUSED\n", 3) == ProbeResult(error="ECONNREFUSED")
    assert probe_result("pd-probe error bad port\n", 3).error == "bad port"
    assert "did not finish" in (probe_result("", None).error or "")
    assert "no node" in (probe_result("exec: node: not found", 127).error or "")


def test_parse_output_takes_the_last_probe_line() -> None:
    assert parse_output("pd-probe addr 172.17.0.1\n") == ("addr", "172.17.0.1")
    assert parse_output("pd-probe addr \n") == ("addr", "")
    assert parse_output("other\n") is None
