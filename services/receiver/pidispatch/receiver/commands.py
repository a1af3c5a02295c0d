"""The receiver's CLI verbs: ``pi-dispatch receiver`` (and ``python -m pidispatch.receiver``)."""

from __future__ import annotations

import argparse
import os

from pidispatch.common.log import configure_logging
from pidispatch.common.settings import load_settings


async def run_receiver(args: argparse.Namespace) -> int:
    """Startup order of every service: logging, settings and the arms (exit 2 when bad), then resources."""
    settings = load_settings()
    configure_logging("receiver", settings.log_level)
    from pidispatch.forges.receive import load_receiver_config
    from pidispatch.receiver.config import load_spool_config
    from pidispatch.receiver.service import serve  # aiohttp loads only when the verb runs

    config = load_receiver_config(settings, os.environ)
    return await serve(settings, config, load_spool_config(settings, os.environ))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(func=run_receiver, service=True)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from pidispatch.forges.receive import arm_hints

    parser = sub.add_parser(
        "receiver",
        help="verify forge webhooks and append them to the events stream",
        description=(
            "Serve webhooks on RECEIVER_BIND:RECEIVER_PORT for each forge whose variables are set: "
            f"{', '.join(arm_hints())}."
        ),
    )
    add_arguments(parser)
