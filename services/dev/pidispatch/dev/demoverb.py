"""``pi-dispatch demo-image``: the tiny job image ``pi-dispatch dev`` runs when no real one exists."""

from __future__ import annotations

import argparse

from pidispatch.common.settings import Settings
from pidispatch.dev.demoimage import DEMO_AGENT_SCRIPT, build_image


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser(
        "demo-image", help="build a tiny demo job image from this machine's busybox",
        description="Build a tiny job image whose agent prints what a job is given (no model, no "
        "registry): what `pi-dispatch dev` runs when no real job image exists.",
    )
    d.add_argument("--tag", default=Settings().job_image, help="image tag (default %(default)s)")
    d.set_defaults(func=demo_image_command)


async def demo_image_command(args: argparse.Namespace) -> int:
    await build_image(args.tag, DEMO_AGENT_SCRIPT)
    hint = "" if args.tag == Settings().job_image else f"; set PI_JOB_IMAGE={args.tag} to run jobs in it"
    print(f"built {args.tag}{hint}")
    return 0
