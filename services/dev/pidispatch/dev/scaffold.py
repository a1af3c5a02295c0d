"""``pi-dispatch init [DIR]``: a starting ``.env`` and ``triggers.json`` for a new deployment.

Create-only: a file that exists is reported as kept and never rewritten, so running it twice is harmless.
``triggers.json`` accepts no comment fields (every key is either honoured or refused), so the examples are
explained in ``triggers.example.md`` beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
from pathlib import Path
from typing import Any

# The forge the examples are written for: the one `dev` stands in for, so they fire in a first run.
from pidispatch.forges.github import FORGE as EXAMPLE_FORGE

ENV_FILE = ".env"
TRIGGERS_FILE = "triggers.json"
EXAMPLES_FILE = "triggers.example.md"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "init", help="write a starting .env and triggers.json (never overwrites)",
        description="Write DIR/.env (a fresh webhook secret, mode 0600), DIR/triggers.json (one working "
        "example of every trigger type) and DIR/triggers.example.md (what each example does). A file "
        "that exists is kept as it is.",
    )
    p.add_argument("dir", nargs="?", default=".", help="folder to write into (default: the current one)")
    p.set_defaults(func=init_command)


# The cron example's folder: absolute and, on purpose, absent, so no worker serves it until it is edited.
CRON_FOLDER = "/srv/repos/your-project"


def example_triggers() -> dict[str, Any]:
    """One working entry per trigger type, all on the forge `dev` stands in for."""
    kind = EXAMPLE_FORGE.name
    return {"triggers": [
        {"on": {"type": "label", "any": ["pi:fix"], "none": ["blocked"]},
         "run": {"kind": kind, "flow": "fix"}},
        {"on": {"type": "comment", "phrase": "@pi"},
         "run": {"kind": kind, "flow": "triage", "instructions": "Answer in the thread; never push."}},
        {"on": {"type": "pull_request", "action": [EXAMPLE_FORGE.pr_label_action or "labeled"],
                "any": ["pi:review"]},
         "run": {"kind": kind, "flow": "review"}},
        {"on": {"type": "pull_request", "action": ["review_submitted"], "reviewState": ["changes_requested"]},
         "run": {"kind": kind, "flow": "address-review"}},
        {"on": {"type": "issue", "action": sorted(EXAMPLE_FORGE.issue_actions or ()), "number": 1,
                "once": True},
         "run": {"kind": kind, "command": "release-notes"}},
        {"on": {"type": "cron", "id": "nightly", "pattern": "0 3 * * *"},
         "run": {"kind": "local", "folder": CRON_FOLDER, "flow": "tidy",
                 "task": "Fix one failing test, commit nothing else."}},
    ]}


EXAMPLES_TEXT = """\
# What each example in triggers.json does

`triggers.json` takes no comment fields (an unknown key refuses the whole file), so the examples are
explained here, in the file's order. Remove what you do not want; `triggers[N]` in an error is entry N.
The full field list: docs/configuration.md.

0. **label**: an issue or pull request gets the label `pi:fix` (and does not carry `blocked`): the agent
   runs flow `fix` in a clone of that repository.
1. **comment**: a comment containing `@pi`: flow `triage`, with the extra instructions given.
2. **pull_request (label)**: a pull request is labelled `pi:review`: flow `review`.
3. **pull_request (review)**: a review asking for changes: flow `address-review`.
4. **issue**: issue #1 is closed: command `release-notes`, once (`once: true`; the worker then writes
   `on.disarmed` into this file). Close rules ask the forge who closed it, so the router needs the forge's
   credentials.
5. **cron**: every night at 03:00, flow `tidy` edits the git folder `run.folder` in place with the task
   given. Only a worker whose disk has that folder serves it, so the example stays inert until you point
   `run.folder` at a git checkout of yours.
"""


def env_text(secret: str, triggers: Path) -> str:
    return (
        "# pi-dispatch configuration (docs/configuration.md lists every variable). Load it in a shell with\n"
        "#   set -a; . ./.env; set +a\n"
        f"WEBHOOK_SECRET={secret}\n"
        f"PI_TRIGGERS_FILE={shlex.quote(str(triggers))}\n"
        "# REDIS_URL=redis://127.0.0.1:6379/0\n"
        "# RECEIVER_PORT=3000\n"
        "# PI_JOB_IMAGE=pi-job:latest\n"
        "# PI_LOGS_DIR=./.pi-dispatch/logs\n"
        "# GITHUB_AUTH_SOURCE=pat\n"
        "# GITHUB_PAT=\n"
        "# PI_PROVIDER=anthropic\n"
        "# ANTHROPIC_API_KEY=\n"
    )


def _create(path: Path, text: str, mode: int) -> bool:
    """Write ``text`` to a new file with ``mode`` from creation; False when the file already exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return True


def scaffold(folder: Path) -> list[tuple[Path, bool]]:
    """Write the three files that are missing; each path with whether it was written (False: kept)."""
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    triggers = folder / TRIGGERS_FILE
    plan = (
        (folder / ENV_FILE, env_text(secrets.token_hex(32), triggers), 0o600),
        (triggers, json.dumps(example_triggers(), indent=2) + "\n", 0o644),
        (folder / EXAMPLES_FILE, EXAMPLES_TEXT, 0o644),
    )
    return [(path, _create(path, text, mode)) for path, text, mode in plan]


def init_command(args: argparse.Namespace) -> int:
    from pidispatch.dev.banner import cli_path

    folder = Path(args.dir)
    for path, written in scaffold(folder):
        print(f"{'wrote' if written else 'kept '} {path}")
    cli = cli_path()
    print("\nNext (the rules are explained in triggers.example.md):\n"
          f"  cd {shlex.quote(str(folder.resolve()))} && set -a && . ./{ENV_FILE} && set +a\n"
          f"  {cli} dev\n"
          f"  {cli} events   # in another terminal, same folder: what each delivery did")
    return 0
