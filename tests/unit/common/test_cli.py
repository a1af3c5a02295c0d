"""PD_HALT_ON_CONFIG_ERROR: a service stopped by a configuration error waits for a stop signal instead of
exiting into a restart loop; every other case still exits 2 at once. Real processes, real signals."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pidispatch.common.cli import HALTED, halt_on_config_error
from pidispatch.common.errors import ConfigError

DEADLINE_S = 20.0
CONFIG_LINE = "pi-dispatch: configuration error: PD_LOG_LEVEL='loud' is refused"


async def _start(verb: str, **env: str) -> asyncio.subprocess.Process:
    full = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"), **env}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pidispatch.common.cli", verb,
        env=full, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stderr is not None
    return (await asyncio.wait_for(proc.stderr.readline(), DEADLINE_S)).decode().rstrip("\n")


@pytest.mark.parametrize(("verb", "stop"), [("router", signal.SIGTERM), ("worker", signal.SIGTERM),
                                             ("receiver", signal.SIGINT)])  # fmt: skip
async def test_a_service_halts_on_a_configuration_error_until_stopped(verb: str, stop: int) -> None:
    proc = await _start(verb, PD_LOG_LEVEL="loud", PD_HALT_ON_CONFIG_ERROR="1")
    try:
        assert (await _line(proc)).startswith(CONFIG_LINE)
        assert await _line(proc) == HALTED
        # Still there: the halt line is written with the stop signals already blocked, so from here on
        # the process only ends by the signal below, and it would have ended already if it did not wait.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), 0.5)
        assert proc.returncode is None
        proc.send_signal(stop)
        assert await asyncio.wait_for(proc.wait(), DEADLINE_S) == 2
        assert proc.stderr is not None
        assert await proc.stderr.read() == b""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.parametrize(
    ("verb", "env"),
    [
        ("router", {}),
        ("worker", {"PD_HALT_ON_CONFIG_ERROR": "0"}),
        ("worker", {"PD_HALT_ON_CONFIG_ERROR": ""}),
        # `runs` is a command, not a service: it never waits, whatever the variable says.
        ("runs", {"PD_HALT_ON_CONFIG_ERROR": "1"}),
    ],
)
async def test_otherwise_a_configuration_error_exits_2_at_once(verb: str, env: dict[str, str]) -> None:
    proc = await _start(verb, PD_LOG_LEVEL="loud", **env)
    assert await asyncio.wait_for(proc.wait(), DEADLINE_S) == 2
    assert proc.stderr is not None
    lines = (await proc.stderr.read()).decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(CONFIG_LINE)


async def test_a_bad_value_is_itself_a_configuration_error_and_does_not_halt() -> None:
    # Otherwise valid settings: the refusal is of the variable itself, before the service starts.
    proc = await _start("router", PD_HALT_ON_CONFIG_ERROR="yes")
    assert await asyncio.wait_for(proc.wait(), DEADLINE_S) == 2
    assert proc.stderr is not None
    lines = (await proc.stderr.read()).decode().splitlines()
    assert lines == [
        "pi-dispatch: configuration error: PD_HALT_ON_CONFIG_ERROR='yes' is refused; accepted: 0 or 1"
    ]


@pytest.mark.parametrize(("value", "halt"), [(None, False), ("", False), ("0", False), (" 1 ", True)])
def test_the_variable_reads_0_or_1(value: str | None, halt: bool) -> None:
    env = {} if value is None else {"PD_HALT_ON_CONFIG_ERROR": value}
    assert halt_on_config_error(env) is halt


@pytest.mark.parametrize("value", ["yes", "true", "2", "on"])
def test_anything_else_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^PD_HALT_ON_CONFIG_ERROR=.* accepted: 0 or 1$"):
        halt_on_config_error({"PD_HALT_ON_CONFIG_ERROR": value})


Verb = tuple[str, str | None, argparse.ArgumentParser]


def _verbs(parser: argparse.ArgumentParser, path: str = "") -> list[Verb]:
    """Every sub-command under ``parser``, nested ones too: (its path, its help, its parser)."""
    found: list[Verb] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((f"{path}{name}", helps.get(name), sub))
                found.extend(_verbs(sub, f"{path}{name} "))
    return found


def test_every_verb_has_help_a_description_and_help_on_every_flag() -> None:
    from pidispatch.common.cli import build_parser

    verbs = _verbs(build_parser())
    assert len(verbs) > 20
    for name, help_text, sub in verbs:
        assert help_text, f"{name}: no help"
        assert (sub.description or "").strip(), f"{name}: no description in --help"
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                assert action.help, f"{name} {action.option_strings or action.dest}: no help"


def test_a_reader_that_goes_away_ends_the_verb_quietly() -> None:
    # `pi-dispatch events | head -1`: the verb's next write finds the pipe closed.
    verb = ("import argparse, sys\n"
            "from pidispatch.common.cli import run\n"
            "def talk(args):\n"
            "    for _ in range(100_000): print('a line of output')\n"
            "sys.exit(run(talk, argparse.Namespace()))\n")
    proc = subprocess.Popen([sys.executable, "-c", verb], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"a line of output\n"
    proc.stdout.close()  # what head does after its line
    code = proc.wait(30)
    err = proc.stderr.read().decode()
    assert code == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


def _closed_reader(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run ``pi-dispatch <argv>`` with stdout a pipe whose reader is already gone (`| head -0`) and
    stdout buffered as it is without a terminal: its status and its stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}
    try:
        proc = subprocess.run([sys.executable, "-m", "pidispatch.common.cli", *argv], stdout=write_end,
                              stderr=subprocess.PIPE, env=env, cwd=cwd, timeout=60, check=False)
    finally:
        os.close(write_end)
    return proc.returncode, proc.stderr.decode()


def test_a_short_listing_whose_reader_is_gone_ends_the_verb_quietly(
    base_env: dict[str, str], tmp_path: Path
) -> None:
    # A listing this short sits in stdout's buffer until the verb returns: the flush that finds the
    # reader gone must be the verb's, not the interpreter's ("Exception ignored …", status 120).
    code, err = _closed_reader(["events"], {**os.environ, **base_env}, tmp_path)
    assert code == 141 and "BrokenPipe" not in err, err


def test_help_whose_reader_is_gone_ends_quietly(tmp_path: Path) -> None:
    code, err = _closed_reader(["--help"], dict(os.environ), tmp_path)
    assert (code, err) == (0, "")
