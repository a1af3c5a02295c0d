"""Dev tooling's verbs (entry point ``pidispatch.commands``): ``dev``, ``init``, and the image builds."""

from __future__ import annotations

import argparse

from pidispatch.dev import demoverb, egressimage, jobimage, scaffold, serviceimage, stack, standins


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for module in (stack, scaffold, jobimage, serviceimage, egressimage, demoverb, standins):
        module.register(sub)
