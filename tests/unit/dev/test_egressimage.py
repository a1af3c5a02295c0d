"""The pure parts of ``pi-dispatch egress-image build``: arguments, the build context, the build command
line, and the parts of the image's contract that can be read off its files (where the rules go, what the
proxy logs and refuses)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from pidispatch.common import cli
from pidispatch.common.errors import ConfigError
from pidispatch.dev import egressimage
from pidispatch.dev.egressimage import context_files, find_image_dir, plan
from pidispatch.dev.imagebuild import ImagePlan as EgressPlan
from pidispatch.dev.imagebuild import build_argv


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["egress-image", "build", *argv])


def directives(conf: str) -> list[str]:
    return [line.strip() for line in conf.splitlines() if line.strip() and not line.startswith("#")]


def test_defaults_build_the_debian_base_and_tag_pi_egress_latest() -> None:
    args = parse()
    assert args.func is egressimage.build and not args.check
    assert plan(args) == EgressPlan(tag="pi-egress:latest", base="pd-egress-base:bookworm", build_base=True)


def test_a_base_skips_build_base() -> None:
    assert plan(parse("--base", "debian:bookworm-squid", "--tag", "mine:1", "--check")) == EgressPlan(
        tag="mine:1", base="debian:bookworm-squid", build_base=False
    )


@pytest.mark.parametrize("argv", [("--tag", ""), ("--tag", "pi egress"), ("--base", "a b")])
def test_bad_arguments_are_config_errors(argv: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError):
        plan(parse(*argv))


def test_a_config_error_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["egress-image", "build", "--tag", " "]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tag" in err


def test_verb_is_required() -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["egress-image"])


def test_find_image_dir_walks_up(tmp_path: Path) -> None:
    image_dir = tmp_path / "images" / "egress"
    image_dir.mkdir(parents=True)
    (image_dir / "Dockerfile").write_text("FROM x\n")
    deep = tmp_path / "services" / "dev" / "pidispatch" / "dev" / "egressimage.py"
    assert find_image_dir(deep) == image_dir


def test_find_image_dir_missing_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="images/egress"):
        find_image_dir(tmp_path / "x.py")


def test_the_context_is_what_the_dockerfile_copies_and_not_the_readme_or_the_base_script() -> None:
    image_dir = find_image_dir()
    files = context_files(image_dir)
    assert set(files) == {"Dockerfile", "squid.conf", "pd-egress"}
    assert (image_dir / "build-base.sh").is_file() and (image_dir / "README.md").is_file()
    copied = re.findall(r"^COPY (\S+) ", files["Dockerfile"].decode(), flags=re.MULTILINE)
    assert set(copied) == {"squid.conf", "pd-egress"}


def test_the_entrypoint_writes_the_rules_where_squid_conf_includes_them_then_execs_squid() -> None:
    files = context_files(find_image_dir())
    entry, conf = files["pd-egress"].decode(), directives(files["squid.conf"].decode())
    (include,) = [d.split()[1] for d in conf if d.startswith("include ")]
    assert f"printf '%s\\n' \"${{PD_EGRESS_RULES-}}\" > {include}" in entry
    assert re.search(r"^exec squid -N ", entry, flags=re.MULTILINE)
    assert str(Path(include).parent) in files["Dockerfile"].decode()


def test_squid_conf_refuses_what_the_rules_do_not_allow_caches_nothing_and_logs_to_stdout() -> None:
    conf = directives(context_files(find_image_dir())["squid.conf"].decode())
    access = [d for d in conf if d.startswith(("include ", "http_access "))]
    assert access == ["include /run/pd-egress/rules.conf", "http_access deny all"]
    for line in ("http_port 3128", "cache deny all", "pid_filename none", "via off",
                 "forwarded_for delete", "httpd_suppress_version_string on",
                 "shutdown_lifetime 1 seconds", "access_log stdio:/dev/stdout squid",
                 "cache_log /dev/stderr"):
        assert line in conf
    assert not [d for d in conf if d.startswith("cache_dir ")]


def test_build_argv_passes_base_and_hash() -> None:
    p = EgressPlan(tag="pi-egress:latest", base="b:1", build_base=False)
    argv = build_argv(p, build_hash_="abc", context=Path("/ctx"))
    assert argv[:2] == ["docker", "build"]
    assert argv[2:4] == ["--build-arg", "BASE=b:1"]
    assert "BUILD_HASH=abc" in argv
    assert argv[-3:] == ["-t", "pi-egress:latest", "/ctx"]
