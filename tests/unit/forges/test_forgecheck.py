"""The worker's pure checks of forge answers and job addresses (``pidispatch.forges.check``)."""

from __future__ import annotations

from typing import Any

import pytest

from pidispatch.common.outcome import InfraFault, JobConfigRefused
from pidispatch.forges.check import RATE_LIMITED, UNAVAILABLE, check_branch, check_clone_url, failure


@pytest.mark.parametrize(("url", "api", "ok"), [
    ("https://github.com/o/r.git", "https://api.github.com", True),
    ("https://gitlab.example.com:8443/g/s/p.git", "https://gitlab.example.com:8443", True),
    ("http://127.0.0.1:8080/o/r.git", "http://127.0.0.1:8080", True),
    ("http://github.com/o/r.git", "https://api.github.com", False),  # no downgrade from an https API
    ("https://x-access-token:t@github.com/o/r.git", "https://api.github.com", False),
    ("https://org@dev.azure.com/org/p/_git/r", "https://dev.azure.com/org", False),
    ("https://github.com/o/r.git?", "https://api.github.com", False),
    ("https://github.com/o/r.git#", "https://api.github.com", False),
    ("https:///o/r.git", "https://api.github.com", False),
    ("https://github.com:99999/o/r.git", "https://api.github.com", False),
    ("https://github.com/o/r .git", "https://api.github.com", False),
    ("git@github.com:o/r.git", "https://api.github.com", False),
    ("", "https://api.github.com", False),
    (None, "https://api.github.com", False),
])
def test_clone_url_check(url: object, api: str, ok: bool) -> None:
    if ok:
        assert check_clone_url(url, api, "github") == url
    else:
        with pytest.raises(JobConfigRefused):
            check_clone_url(url, api, "github")




@pytest.mark.parametrize("name", ["main", "release/2.x", "feature/a-b_c", "v1.0"])
def test_ordinary_branch_names_pass(name: str) -> None:
    assert check_branch(name, "github") == name


@pytest.mark.parametrize("name", [
    "", "-x", "/x", "x/", ".x", "x/.y", "x..y", "x//y", "x y", "x~1", "x^", "x:y", "x?", "x*", "x[",
    "x\\y", "x.lock", "x.", "a@{b", "@", "x\x00", "x\x7f", None, 5, "a" * 256,
])
def test_unsafe_branch_names_are_refused(name: object) -> None:
    with pytest.raises(JobConfigRefused):
        check_branch(name, "github")


@pytest.mark.parametrize(("status", "headers", "expected"), [
    (429, {}, RATE_LIMITED), (403, {"retry-after": "1"}, RATE_LIMITED),
    (403, {"X-RateLimit-Remaining": "0"}, RATE_LIMITED), (500, {}, UNAVAILABLE), (504, {}, UNAVAILABLE),
    (408, {}, UNAVAILABLE), (401, {}, JobConfigRefused), (403, {}, JobConfigRefused),
    (404, {}, JobConfigRefused), (410, {}, JobConfigRefused), (422, {}, JobConfigRefused),
    (301, {}, JobConfigRefused),
])
def test_failure_classification(status: int, headers: dict[str, str], expected: Any) -> None:
    exc = failure("github", status, headers, "the lookup", "GITHUB_AUTH_SOURCE")
    if expected is JobConfigRefused:
        assert isinstance(exc, JobConfigRefused) and "GITHUB_AUTH_SOURCE" in str(exc)
    else:
        assert isinstance(exc, InfraFault) and exc.reason == expected
