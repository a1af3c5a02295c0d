"""The receiver's CLI verbs: ``pi-dispatch receiver`` (and ``python -m pidispatch.receiver``)."""

from __future__ import annotations

import argparse

from pidispatch.common.log import configure_logging
from pidispatch.common.settings import load_settings


async def run_receiver(args: argparse.Namespace) -> int:
    """Startup order of every service: logging, settings (exit 2 when bad), then resources."""
    configure_logging("receiver")
    settings = load_settings()
    from pidispatch.receiver.app import serve  # aiohttp loads only when the verb runs

    return await serve(settings)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(func=run_receiver)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "receiver",
        help="verify forge webhooks and append them to the events stream",
        description="Serve webhooks on RECEIVER_BIND:RECEIVER_PORT (GitHub when WEBHOOK_SECRET is set).",
    )
    add_arguments(parser)
