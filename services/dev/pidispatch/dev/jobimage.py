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
from pidispatch.dev import egressimage
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
    """``images/job`` in the repository this package is installed from (editable), searched upwards."""
    here = (start or Path(__file__)).resolve()
    for folder in (here, *here.parents):
        candidate = folder / IMAGE_DIR
        if (candidate / "Dockerfile").is_file():
            return candidate
    raise ConfigError(
        f"no {IMAGE_DIR}/Dockerfile above {here}; job-image build needs the repository checkout "
        "(pip install -e . from it)"
    )


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
    p = sub.add_parser("job-image", help="build the job image (pi and its runner)",
                       description="Build the image jobs run in (PI_JOB_IMAGE): the pi agent and its runner.")
    verbs = p.add_subparsers(dest="job_image_command", metavar="VERB", required=True)
    b = verbs.add_parser(
        "build", help="build the job image; skipped when nothing changed",
        description="Build the job image with docker; nothing is rebuilt when its inputs are unchanged.",
    )
    b.add_argument(
        "--base", default=None,
        help="image with node >= 20.6 and npm to build on (default: the Debian base from build-base.sh)",
    )
    b.add_argument(
        "--runtime", default=None, help="image for the final stage (default: the same as --base)"
    )
    b.add_argument("--tag", default=DEFAULT_TAG, help=f"the image's tag (default {DEFAULT_TAG})")
    b.add_argument("--check", action="store_true",
                   help="build nothing: exit 0 when the image is current for this tree, else 1")
    b.set_defaults(func=build)
