from __future__ import annotations

from pidispatch.common.secret import Secret


def test_secret_never_prints_its_value() -> None:
    for value in ("hunter2", b"hunter2"):
        s = Secret(value)
        assert repr(s) == str(s) == f"{s}" == "Secret(***)"
        assert "hunter2" not in repr([s, {"k": s}])
        assert s.reveal() == value


def test_secrets_compare_by_value() -> None:
    assert Secret("a") == Secret("a") and Secret("a") != Secret("b")
    assert Secret(b"a") == Secret(b"a")
