"""``pi-dispatch service render|install``: the receiver, router and worker as systemd units on a bare host.

One unit per service runs this installation's ``pi-dispatch <service>`` by its absolute path, in the folder
``pi-dispatch init`` wrote and with that folder's ``.env`` as its environment; a ``pi-dispatch.target``
groups them, so two commands start everything at boot and now. Rendering is pure (``render_units``); the
verb reads the folder, then writes every unit or none.
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pidispatch.common import __version__
from pidispatch.common.errors import ConfigError

SERVICES = ("receiver", "router", "worker")
TARGET = "pi-dispatch.target"
# The files `pi-dispatch init` writes (console cannot import dev, so the names are repeated here).
ENV_FILE = ".env"
SYSTEM_DIR = Path("/etc/systemd/system")
DOCKER_GROUP = "docker"
# The worker's default PI_SHUTDOWN_GRACE, and what systemd adds to it before SIGKILL: running jobs get
# their grace, then the worker leaves their containers running for the next start to re-attach.
GRACE_DEFAULT_S, STOP_MARGIN_S = 10, 20

_SUMMARY = {
    "receiver": "forge webhooks, verified, into Redis",
    "router": "deliveries matched against triggers.json into jobs",
    "worker": "one container per job",
}
# Restricts nothing the services use: the jobs folder in /tmp and the logs under $HOME must stay the
# host's own (dockerd bind-mounts them), and the Docker socket is reached over AF_UNIX.
_HARDENING_SYSTEM = (
    "NoNewPrivileges=yes", "ProtectSystem=full", "PrivateDevices=yes",
    "ProtectKernelTunables=yes", "ProtectKernelModules=yes", "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes", "ProtectClock=yes", "ProtectHostname=yes", "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "RestrictSUIDSGID=yes", "LockPersonality=yes", "SystemCallArchitectures=native",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
)
# A worker run as root hands each job its folder (chown) and reads local jobs' folders of any owner; as
# any other account (or as another service) no capability is used at all.
_ROOT_WORKER_CAPS = "CAP_CHOWN CAP_FOWNER CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH"
# A user manager cannot set up mount namespaces: only the seccomp-based settings apply there.
_HARDENING_USER = (
    "NoNewPrivileges=yes", "RestrictRealtime=yes", "RestrictSUIDSGID=yes", "LockPersonality=yes",
    "SystemCallArchitectures=native",
)


@dataclass(frozen=True)
class UnitPlan:
    """What the units say: every value already checked, so rendering cannot fail."""

    folder: Path
    cli: str
    user_mode: bool
    run_as: str | None  # system units only: the account the services run as
    docker_group: bool  # the worker joins the docker group (system units, when the group exists)
    stop_timeout_s: int
    services: tuple[str, ...]


def unit_name(service: str) -> str:
    return f"pi-dispatch-{service}.service"


def _escape(value: str) -> str:
    """A path in a unit file: ``%`` starts a specifier there, so it is doubled."""
    return value.replace("%", "%%")


def _exec_word(value: str) -> str:
    """One word of ``ExecStart=``: specifiers and ``$`` doubled, quoted when it has spaces or quotes."""
    word = _escape(value).replace("$", "$$")
    if any(c in word for c in " \t\"'\\"):
        word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def _service_unit(plan: UnitPlan, service: str) -> str:
    # A Redis or Valkey of this host's system manager is started first when there is one (After= alone
    # needs no such unit); a user manager cannot order itself after system units.
    wants = [] if plan.user_mode else ["network-online.target"]
    after = [] if plan.user_mode else [*wants, "redis-server.service", "valkey-server.service"]
    if service == "worker":
        # The system daemon, or rootless Docker's user unit of the same name; absent, nothing waits.
        after.append("docker.service")
        wants.append("docker.service")
    lines = [
        f"# Written by pi-dispatch service install ({__version__}); --force rewrites it, "
        f"`systemctl{_flag(plan)} edit {unit_name(service)}` adds to it.",
        "[Unit]",
        f"Description=pi-dispatch {service}: {_SUMMARY[service]}",
        f"PartOf={TARGET}",
        *([f"After={' '.join(after)}"] if after else []),
        *([f"Wants={' '.join(wants)}"] if wants else []),
        "",
        "[Service]",
        "Type=exec",
        *([f"User={plan.run_as}"] if plan.run_as else []),
        *([f"SupplementaryGroups={DOCKER_GROUP}"] if service == "worker" and plan.docker_group else []),
        f"WorkingDirectory={_escape(str(plan.folder))}",
        f"EnvironmentFile={_escape(str(plan.folder / ENV_FILE))}",
        f"ExecStart={_exec_word(plan.cli)} {service}",
        "Restart=on-failure",
        "RestartSec=5",
        "# Exit 2 is a configuration error (its one line is in the journal): a restart cannot fix it.",
        "RestartPreventExitStatus=2",
        *([f"TimeoutStopSec={plan.stop_timeout_s}"] if service == "worker" else []),
        *(_HARDENING_USER if plan.user_mode else (*_HARDENING_SYSTEM, _capabilities(plan, service))),
        "",
        "[Install]",
        f"WantedBy={TARGET}",
    ]
    return "\n".join(lines) + "\n"


def _capabilities(plan: UnitPlan, service: str) -> str:
    root_worker = service == "worker" and plan.run_as == "root"
    return f"CapabilityBoundingSet={_ROOT_WORKER_CAPS if root_worker else ''}"


def _target_unit(plan: UnitPlan) -> str:
    wanted = " ".join(unit_name(s) for s in plan.services)
    return (
        f"# Written by pi-dispatch service install ({__version__}).\n"
        "[Unit]\n"
        f"Description=pi-dispatch ({', '.join(plan.services)})\n"
        f"Wants={wanted}\n"
        "\n"
        "[Install]\n"
        f"WantedBy={'default.target' if plan.user_mode else 'multi-user.target'}\n"
    )


def render_units(plan: UnitPlan) -> dict[str, str]:
    """Every unit file by name: one per service, then the target."""
    units = {unit_name(s): _service_unit(plan, s) for s in plan.services}
    units[TARGET] = _target_unit(plan)
    return units


def _flag(plan: UnitPlan) -> str:
    return " --user" if plan.user_mode else ""


def next_commands(plan: UnitPlan) -> list[str]:
    return [f"systemctl{_flag(plan)} daemon-reload", f"systemctl{_flag(plan)} enable --now {TARGET}"]


# --- reading the folder ------------------------------------------------------------------------------


def env_values(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of a ``.env`` as systemd reads them (comments and blanks skipped, one level of
    shell quoting). Only the worker's stop timeout and the metrics port are read from it."""
    values: dict[str, str] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        try:
            words = shlex.split(raw)
        except ValueError:
            words = [raw]
        values[key.strip()] = words[0] if len(words) == 1 else raw.strip()
    return values


def stop_timeout(values: Mapping[str, str]) -> int:
    grace = values.get("PI_SHUTDOWN_GRACE", "")
    return (int(grace) if grace.isdigit() else GRACE_DEFAULT_S) + STOP_MARGIN_S


def _cli_path() -> str:
    """This installation's ``pi-dispatch``: beside the interpreter (a venv), else the one being run."""
    beside = Path(sys.executable).parent / "pi-dispatch"
    if os.access(beside, os.X_OK):
        return str(beside.absolute())
    return str(Path(sys.argv[0]).absolute())


def _no_control(what: str, value: str) -> None:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ConfigError(f"service: {what} has a control character; accepted: a path without one")


def _run_as(requested: str | None, env_file: Path) -> str:
    """The account of system units: --run-as, else the owner of the folder's ``.env``; root only when
    asked for by name (the services need no privilege, the worker only the docker group)."""
    if requested is not None:
        try:
            return pwd.getpwnam(requested).pw_name
        except KeyError:
            raise ConfigError(f"service --run-as {requested!r}: no such user; accepted: an account on "
                              "this host") from None
    owner = pwd.getpwuid(env_file.stat().st_uid).pw_name
    if owner == "root":
        raise ConfigError(f"service: {env_file} belongs to root, so no account to run the services as "
                          "follows from it; accepted: --run-as USER (an account that owns the folder), or "
                          "--run-as root")
    return owner


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def plan_for(args: argparse.Namespace) -> tuple[UnitPlan, dict[str, str]]:
    """The plan from the folder and the options, and the folder's ``.env`` values (for ``notes``)."""
    folder = Path(args.dir).absolute()
    env_file = folder / ENV_FILE
    _no_control("the folder", str(folder))
    if not env_file.is_file():
        raise ConfigError(f"service: {env_file} is not a file; accepted: a folder `pi-dispatch init` wrote "
                          f"(run: pi-dispatch init {shlex.quote(str(folder))})")
    cli = _cli_path()
    _no_control("the pi-dispatch path", cli)
    values = env_values(env_file.read_text(errors="replace"))
    services = tuple(s for s in SERVICES if s in (args.only or SERVICES))
    return UnitPlan(
        folder=folder, cli=cli, user_mode=args.user,
        run_as=None if args.user else _run_as(args.run_as, env_file),
        docker_group=not args.user and _group_exists(DOCKER_GROUP),
        stop_timeout_s=stop_timeout(values), services=services,
    ), values


def notes(plan: UnitPlan, values: Mapping[str, str]) -> list[str]:
    """What the units cannot settle themselves, one line each."""
    out = []
    if values.get("PD_METRICS_PORT") and {"router", "worker"} <= set(plan.services):
        # A unit's Environment= cannot override its EnvironmentFile=, so the port must leave the file.
        out.append("PD_METRICS_PORT in .env: the router and the worker would both listen on it; move it "
                   f"to each unit (systemctl{_flag(plan)} edit pi-dispatch-worker.service: [Service] "
                   "Environment=PD_METRICS_PORT=9101)")
    if "worker" in plan.services and not plan.user_mode and not plan.docker_group:
        out.append(f"no group {DOCKER_GROUP!r} on this host: make sure {plan.run_as} can reach the Docker "
                   "daemon the worker uses")
    if plan.user_mode:
        user = pwd.getpwuid(os.getuid()).pw_name
        out.append(f"user units stop when you log out; to keep them running: loginctl enable-linger {user}")
        if "worker" in plan.services and not os.access("/var/run/docker.sock", os.R_OK | os.W_OK):
            out.append(f"this account cannot use /var/run/docker.sock: join the {DOCKER_GROUP} group "
                       "(or run rootless Docker) before starting the worker")
    return out


# --- writing -----------------------------------------------------------------------------------------


def unit_dir(args: argparse.Namespace, env: Mapping[str, str]) -> Path:
    """--unit-dir, else the user manager's folder (--user) or the system's, which needs root."""
    if args.unit_dir:
        return Path(args.unit_dir).absolute()
    if args.user:
        config = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or str(Path.home()), ".config")
        return Path(config) / "systemd" / "user"
    if os.geteuid() != 0:
        raise ConfigError(f"service install: writing {SYSTEM_DIR} needs root; accepted: sudo pi-dispatch "
                          "service install, or --user for units of your own user manager")
    return SYSTEM_DIR


def compare(units: Mapping[str, str], directory: Path) -> dict[str, str]:
    """Each unit's state on disk: ``new``, ``unchanged`` or ``differs``."""
    states = {}
    for name, text in units.items():
        path = directory / name
        if not path.exists():
            states[name] = "new"
        else:
            states[name] = "unchanged" if path.read_text(errors="replace") == text else "differs"
    return states


def write_units(units: Mapping[str, str], directory: Path, states: Mapping[str, str]) -> None:
    """Each new or changed unit through a temporary file and a rename: systemd never reads half a unit."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in units.items():
        if states[name] == "unchanged":
            continue
        temporary = directory / f".{name}.tmp"
        temporary.write_text(text)
        temporary.chmod(0o644)
        temporary.replace(directory / name)


def install_command(args: argparse.Namespace) -> int:
    plan, values = plan_for(args)
    directory = unit_dir(args, os.environ)
    units = render_units(plan)
    states = compare(units, directory)
    differing = [name for name, state in states.items() if state == "differs"]
    if differing and not args.force:
        verb = "differs" if len(differing) == 1 else "differ"
        raise ConfigError(f"service install: {', '.join(differing)} in {directory} {verb} from what this "
                          "install would write; accepted: --force to overwrite (pi-dispatch service render "
                          "shows the new text)")
    write_units(units, directory, states)
    for name, state in states.items():
        verb = {"new": "wrote", "differs": "rewrote", "unchanged": "kept "}[state]
        print(f"{verb} {directory / name}")
    for line in notes(plan, values):
        print(f"note: {line}")
    print("\nNext:")
    for command in next_commands(plan):
        print(f"  {'' if plan.user_mode or os.geteuid() == 0 else 'sudo '}{command}")
    print(f"Logs: journalctl{_flag(plan)} -u 'pi-dispatch-*' -f")
    return 0


def render_command(args: argparse.Namespace) -> int:
    plan, values = plan_for(args)
    directory = Path(args.unit_dir).absolute() if args.unit_dir else None
    for name, text in render_units(plan).items():
        where = directory / name if directory else name
        print(f"# --- {where}\n{text}")
    for line in notes(plan, values):
        print(f"# note: {line}")
    return 0


def _services(value: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    if not names or any(n not in SERVICES for n in names):
        raise argparse.ArgumentTypeError(f"{value!r}: accepted: a comma list of {', '.join(SERVICES)}")
    return names


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "service", help="install the receiver, router and worker as systemd units",
        description="Write systemd units that run this installation's pi-dispatch receiver, router and "
        "worker in DIR (a folder `pi-dispatch init` wrote) with DIR/.env as their environment, and a "
        f"{TARGET} that starts them together.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, func, text in (
        ("install", install_command, "write the units (never overwrites a different one without --force)"),
        ("render", render_command, "print the units without writing anything"),
    ):
        c = actions.add_parser(action, help=text, description=text[0].upper() + text[1:] + ".")
        c.add_argument("dir", nargs="?", default=".", help="the deployment folder (default: this one)")
        c.add_argument("--user", action="store_true",
                       help="units of your own user manager (~/.config/systemd/user), not the system's")
        c.add_argument("--run-as", metavar="USER",
                       help="system units: the account the services run as (default: the owner of DIR/.env)")
        c.add_argument("--only", type=_services, metavar="LIST",
                       help=f"some of the services, comma-separated (default: {','.join(SERVICES)})")
        c.add_argument("--unit-dir", metavar="PATH", help="write (or name) the units here instead")
        if action == "install":
            c.add_argument("--force", action="store_true", help="overwrite units that differ")
        c.set_defaults(func=func)
