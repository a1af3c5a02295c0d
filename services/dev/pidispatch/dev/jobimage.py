"""``pi-dispatch job-image build``: the job image (the real pi plus ``images/job/runner.mjs``) in one command.

Without ``--base`` it first runs ``images/job/build-base.sh``, which makes the Debian bases from a package
mirror alone (no image registry). Then ``docker build`` of ``images/job``; a build whose inputs did not
change is skipped: the image carries the content hash in its ``dev.pi-dispatch.build-hash`` label.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from pathlib import Path

from pidispatch.common.errors import ConfigError
from pidispatch.dev import egressimage, imagebuild
from pidispatch.dev.imagebuild import EXTRA_CA_NAME, build_or_check

DEFAULT_TAG = "pi-job:latest"
DEFAULT_BASE = "pd-job-base:trixie"
DEFAULT_RUNTIME = "pd-job-runtime:trixie"
IMAGE_DIR = Path("images") / "job"
BASE_SCRIPT = "build-base.sh"


@dataclass(frozen=True)
class BuildPlan:
    tag: str
    base: str
    runtime: str
    build_base: bool  # run build-base.sh first: only for the default Debian bases


def plan(args: argparse.Namespace) -> BuildPlan:
    """Pure: what ``args`` ask for. ``--base`` alone serves both stages (a node image has npm)."""
    tag = (args.tag or "").strip()
    if not tag or any(c.isspace() for c in tag):
        raise ConfigError(
            f"--tag {args.tag!r} is not an image reference; accepted: name[:tag], e.g. {DEFAULT_TAG}"
        )
    base = (args.base or "").strip() or None
    runtime = (args.runtime or "").strip() or None
    for flag, value in (("--base", base), ("--runtime", runtime)):
        if value is not None and any(c.isspace() for c in value):
            raise ConfigError(f"{flag} {value!r} is not an image reference; accepted: name[:tag]")
    if base is None and runtime is not None:
        raise ConfigError("--runtime needs --base; accepted: --base IMAGE [--runtime IMAGE]")
    if base is None:
        return BuildPlan(tag=tag, base=DEFAULT_BASE, runtime=DEFAULT_RUNTIME, build_base=True)
    return BuildPlan(tag=tag, base=base, runtime=runtime or base, build_base=False)


def find_image_dir(start: Path | None = None) -> Path:
    return imagebuild.find_image_dir(IMAGE_DIR, "job-image", start)


def context_files(image_dir: Path) -> dict[str, bytes]:
    """The files a build depends on: everything directly in ``images/job`` but a stray CA bundle."""
    return {
        p.name: p.read_bytes()
        for p in sorted(image_dir.iterdir())
        if p.is_file() and p.name != EXTRA_CA_NAME
    }


def build_argv(plan_: BuildPlan, *, build_hash_: str, context: Path) -> list[str]:
    """Pure: the ``docker build`` command line."""
    return [
        "docker", "build",
        "--build-arg", f"BASE={plan_.base}",
        "--build-arg", f"RUNTIME={plan_.runtime}",
        "--build-arg", f"BUILD_HASH={build_hash_}",
        "-t", plan_.tag,
        str(context),
    ]


async def build(args: argparse.Namespace) -> int:
    plan_ = plan(args)
    image_dir = await asyncio.to_thread(find_image_dir)
    files = await asyncio.to_thread(context_files, image_dir)
    # The Dockerfile's build stage hands the context's CA bundle to npm; the final stage never sees it.
    code = await build_or_check(
        "job-image", plan_.tag, files, [plan_.base, plan_.runtime],
        lambda hash_, context: build_argv(plan_, build_hash_=hash_, context=context),
        base_script=image_dir / BASE_SCRIPT if plan_.build_base else None, check=args.check,
    )
    if code != 0 or args.check:
        return code
    # Every job of the real agent runs behind the egress proxy (PI_EGRESS, on by default): one command
    # makes both images, so the README's one build step gives a working, filtered job.
    return await egressimage.build(argparse.Namespace(tag=egressimage.DEFAULT_TAG, base=None, check=False))


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    b = imagebuild.add_build_verb(
        sub, "job-image", image="job image", default_tag=DEFAULT_TAG, build=build,
        summary="the image jobs run in (PI_JOB_IMAGE): the pi agent and its runner",
        base_help="image with node >= 20.6 and npm to build on (default: the Debian base from build-base.sh)",
    )
    b.add_argument(
        "--runtime", default=None, help="image for the final stage (default: the same as --base)"
    )
