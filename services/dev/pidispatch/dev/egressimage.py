"""``pi-dispatch egress-image build``: the egress proxy image (squid) that the worker puts between a job's
internal network and the outside, forwarding only what the job's rules allow.

Without ``--base`` it first runs ``images/egress/build-base.sh``, which makes the Debian base from a
package mirror alone (no image registry). Then ``docker build`` of ``images/egress`` over a context holding
only what its Dockerfile copies; a build whose inputs did not change is skipped, by the content hash in
the image's label. ``images/egress/README.md`` holds the contract the worker relies on.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from pidispatch.dev import imagebuild
from pidispatch.dev.imagebuild import ImagePlan, build_argv, build_or_check, plan_of

DEFAULT_TAG = "pi-egress:latest"
DEFAULT_BASE = "pd-egress-base:bookworm"
IMAGE_DIR = Path("images") / "egress"
BASE_SCRIPT = "build-base.sh"
# What the Dockerfile copies, and itself: the README and build-base.sh change no image (a rebuilt base
# changes the base's id, which is hashed).
CONTEXT = ("Dockerfile", "squid.conf", "pd-egress")


def plan(args: argparse.Namespace) -> ImagePlan:
    """Pure: what ``args`` ask for."""
    return plan_of(args, DEFAULT_TAG, DEFAULT_BASE)


def find_image_dir(start: Path | None = None) -> Path:
    return imagebuild.find_image_dir(IMAGE_DIR, "egress-image", start)


def context_files(image_dir: Path) -> dict[str, bytes]:
    """The build context: the files the Dockerfile copies, and the Dockerfile."""
    return {name: (image_dir / name).read_bytes() for name in CONTEXT}


async def build(args: argparse.Namespace) -> int:
    plan_ = plan(args)
    image_dir = await asyncio.to_thread(find_image_dir)
    files = await asyncio.to_thread(context_files, image_dir)
    return await build_or_check(
        "egress-image", plan_.tag, files, [plan_.base],
        lambda hash_, context: build_argv(plan_, build_hash_=hash_, context=context),
        base_script=image_dir / BASE_SCRIPT if plan_.build_base else None, check=args.check,
    )


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    imagebuild.add_build_verb(
        sub, "egress-image", image="egress proxy image", default_tag=DEFAULT_TAG, build=build,
        summary="the egress proxy image jobs reach the outside through (squid: what a job's rules allow)",
        base_help="image with Debian's squid package to build on "
        "(default: the Debian base from images/egress/build-base.sh)",
    )
