from __future__ import annotations

import pytest


def test_library_logs_become_json_without_arguments_or_tracebacks(capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import logging

    from pidispatch.common.log import configure_logging

    configure_logging("test")
    try:
        raise ValueError("/home/secret/path")
    except ValueError:
        logging.getLogger("aiohttp.server").exception("Error handling request from %s", "10.1.2.3")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[-1]["event"] == "library_log"
    assert lines[-1]["logger"] == "aiohttp.server"
    assert lines[-1]["error"] == "ValueError"
    text = json.dumps(lines[-1])
    assert "10.1.2.3" not in text and "/home/secret" not in text
