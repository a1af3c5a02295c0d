"""The pure parts of ``pi-dispatch job-image build``: arguments, the content hash, the build command line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pidispatch.common import cli
from pidispatch.common.errors import ConfigError
from pidispatch.dev import jobimage
from pidispatch.dev.imagebuild import EXTRA_CA_NAME
from pidispatch.dev.jobimage import BuildPlan, build_argv, context_files, find_image_dir, plan


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["job-image", "build", *argv])


def test_defaults_build_the_debian_bases_and_tag_pi_job_latest() -> None:
    args = parse()
    assert args.func is jobimage.build
    assert plan(args) == BuildPlan(
        tag="pi-job:latest", base="pd-job-base:trixie", runtime="pd-job-runtime:trixie", build_base=True
    )


def test_base_alone_serves_both_stages_and_skips_build_base() -> None:
    assert plan(parse("--base", "node:22-bookworm-slim", "--tag", "mine:1")) == BuildPlan(
        tag="mine:1", base="node:22-bookworm-slim", runtime="node:22-bookworm-slim", build_base=False
    )


def test_base_and_runtime() -> None:
    p = plan(parse("--base", "node:22-bookworm", "--runtime", "node:22-bookworm-slim"))
    assert (p.base, p.runtime, p.build_base) == ("node:22-bookworm", "node:22-bookworm-slim", False)


@pytest.mark.parametrize(
    "argv",
    [("--tag", ""), ("--tag", "pi job"), ("--base", "a b"), ("--runtime", "node:22-slim")],
)
def test_bad_arguments_are_config_errors(argv: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError):
        plan(parse(*argv))


def test_a_config_error_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["job-image", "build", "--tag", " "]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tag" in err


def test_verb_is_required() -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["job-image"])


def test_context_files_skip_a_stray_ca_bundle_and_folders(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_bytes(b"FROM x\n")
    (tmp_path / EXTRA_CA_NAME).write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "sub").mkdir()
    assert context_files(tmp_path) == {"Dockerfile": b"FROM x\n"}


def test_find_image_dir_walks_up(tmp_path: Path) -> None:
    image_dir = tmp_path / "images" / "job"
    image_dir.mkdir(parents=True)
    (image_dir / "Dockerfile").write_text("FROM x\n")
    deep = tmp_path / "libs" / "common" / "pidispatch" / "common" / "jobimage.py"
    assert find_image_dir(deep) == image_dir


def test_find_image_dir_missing_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="images/job"):
        find_image_dir(tmp_path / "x.py")


def test_the_repository_has_the_job_image() -> None:
    found = find_image_dir()
    assert {"Dockerfile", "runner.mjs", "gate.mjs", "build-base.sh"} <= set(context_files(found))


def test_build_argv_passes_bases_and_hash() -> None:
    p = BuildPlan(tag="pi-job:latest", base="b:1", runtime="r:1", build_base=False)
    argv = build_argv(p, build_hash_="abc", context=Path("/ctx"))
    assert argv[:2] == ["docker", "build"]
    assert argv[2:4] == ["--build-arg", "BASE=b:1"]
    assert "RUNTIME=r:1" in argv and "BUILD_HASH=abc" in argv
    assert argv[-3:] == ["-t", "pi-job:latest", "/ctx"]
