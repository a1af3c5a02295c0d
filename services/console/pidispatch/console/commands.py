"""The operator's verbs (entry point ``pidispatch.commands``): views of what the services keep in Redis
and on disk, and the verbs that change only that state (cancel, pause, resume)."""

from __future__ import annotations

import argparse

from pidispatch.console import (
    control,
    deliveries,
    doctor,
    heal,
    hosts,
    pause,
    runs,
    scheduleview,
    serviceunits,
    statuspage,
    trial,
    waitview,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for module in (deliveries, hosts, control, pause, runs, scheduleview, waitview, doctor, statuspage,
                   serviceunits, trial, heal):
        module.register(sub)
