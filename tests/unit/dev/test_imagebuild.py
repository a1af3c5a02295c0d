"""The pure parts every image build shares: the content hash, sizes, the CA bundle handed into a build."""

from __future__ import annotations

from pathlib import Path

import pytest

from pidispatch.dev.imagebuild import HASH_LEN, build_hash, human_size, trusted_bundle


def test_hash_is_stable_and_order_independent() -> None:
    a = build_hash({"Dockerfile": b"FROM x\n", "runner.mjs": b"//r\n"}, ["sha256:1"])
    b = build_hash({"runner.mjs": b"//r\n", "Dockerfile": b"FROM x\n"}, ["sha256:1"])
    assert a == b and len(a) == HASH_LEN and all(c in "0123456789abcdef" for c in a)


@pytest.mark.parametrize(
    ("files", "bases"),
    [
        ({"Dockerfile": b"FROM y\n", "runner.mjs": b"//r\n"}, ["sha256:1"]),  # content changed
        ({"Dockerfile": b"FROM x\n", "runner.js": b"//r\n"}, ["sha256:1"]),  # name changed
        ({"Dockerfile": b"FROM x\n", "runner.mjs": b"//r\n"}, ["sha256:2"]),  # base rebuilt
        ({"Dockerfile": b"FROM x\n", "runner.mjs": b"//r\n"}, ["sha256:1", "sha256:3"]),  # runtime
        # Moving bytes from one file's end to the next name must not collide.
        ({"Dockerfile": b"FROM x\nrunner.mjs", "": b"//r\n"}, ["sha256:1"]),
    ],
)
def test_hash_changes_with_any_input(files: dict[str, bytes], bases: list[str]) -> None:
    ref = build_hash({"Dockerfile": b"FROM x\n", "runner.mjs": b"//r\n"}, ["sha256:1"])
    assert build_hash(files, bases) != ref


def test_human_size() -> None:
    assert human_size(336_123_456) == "336 MB"


def test_the_trusted_bundle_is_node_extra_ca_certs_then_ssl_cert_file_then_none_that_is_missing(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "a.pem", tmp_path / "b.pem"
    second.write_text("b")
    assert trusted_bundle({"NODE_EXTRA_CA_CERTS": str(first), "SSL_CERT_FILE": str(second)}) == second
    first.write_text("a")
    assert trusted_bundle({"NODE_EXTRA_CA_CERTS": str(first), "SSL_CERT_FILE": str(second)}) == first
