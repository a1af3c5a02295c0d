"""``pi-dispatch service-image build``: the image compose.yaml runs (the services, redis-server, haproxy).

Without ``--base`` it first runs ``images/service/build-base.sh``, which makes the Debian base from a
package mirror alone (no image registry). Then ``docker build`` of the repository's ``Dockerfile`` over a
context holding only what the Dockerfile copies (never ``.pi-dispatch/`` or a virtualenv); a build whose
inputs did not change is skipped, by the content hash in the image's label.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from pidispatch.common.errors import ConfigError
from pidispatch.dev import imagebuild
from pidispatch.dev.imagebuild import ImagePlan, build_argv, build_or_check, plan_of

DEFAULT_TAG = "pi-dispatch:latest"
DEFAULT_BASE = "pd-service-base:bookworm"
BASE_SCRIPT = Path("images") / "service" / "build-base.sh"
# What the Dockerfile copies, as .dockerignore lets a plain `docker build .` see it.
TOP_FILES = ("Dockerfile", "pyproject.toml", "README.md", "LICENSE")
TREES = ("libs", "services")
SKIPPED_PARTS = ("__pycache__",)
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def plan(args: argparse.Namespace) -> ImagePlan:
    """Pure: what ``args`` ask for."""
    return plan_of(args, DEFAULT_TAG, DEFAULT_BASE)


def find_root(start: Path | None = None) -> Path:
    """The repository this package is installed from (editable), searched upwards."""
    here = (start or Path(__file__)).resolve()
    for folder in (here, *here.parents):
        if (folder / "Dockerfile").is_file() and (folder / BASE_SCRIPT).is_file():
            return folder
    raise ConfigError(
        f"no Dockerfile and {BASE_SCRIPT} above {here}; service-image build needs the repository "
        "checkout (pip install -e . from it)"
    )


def context_files(root: Path) -> dict[str, bytes]:
    """The files the build copies, by path relative to ``root``; bytecode caches left out."""
    files = {name: (root / name).read_bytes() for name in TOP_FILES}
    for tree in TREES:
        for path in sorted((root / tree).rglob("*")):
            rel = path.relative_to(root)
            if not path.is_file() or path.suffix in SKIPPED_SUFFIXES:
                continue
            if any(part in SKIPPED_PARTS or part.endswith(".egg-info") for part in rel.parts):
                continue
            files[rel.as_posix()] = path.read_bytes()
    return files


async def build(args: argparse.Namespace) -> int:
    plan_ = plan(args)
    root = await asyncio.to_thread(find_root)
    files = await asyncio.to_thread(context_files, root)
    return await build_or_check(
        "service-image", plan_.tag, files, [plan_.base],
        lambda hash_, context: build_argv(plan_, build_hash_=hash_, context=context),
        base_script=root / BASE_SCRIPT if plan_.build_base else None, check=args.check,
    )


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    imagebuild.add_build_verb(
        sub, "service-image", image="service image", default_tag=DEFAULT_TAG, build=build,
        summary="the services' image that compose.yaml runs (receiver, router, worker, redis, the front)",
        base_help="image with python >= 3.11 (venv), git, redis-server, haproxy and curl to build on "
        "(default: the Debian base from images/service/build-base.sh)",
    )
