"""What every image build of this project shares: the content hash that lets a build with unchanged inputs
be skipped, the trusted CA bundle handed into a build behind a TLS-intercepting proxy, and the ``docker``
CLI calls (output copied line by line, failures as ``InfraError``).

``jobimage`` (the job image) and ``serviceimage`` (the services' image) build on it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pidispatch.common.errors import ConfigError, InfraError

BUILD_HASH_LABEL = "dev.pi-dispatch.build-hash"
# The builder's extra CA bundle goes into a build context under this name; it is never part of the hash:
# it changes how packages are fetched, not what is built.
EXTRA_CA_NAME = "extra-ca.pem"
HASH_LEN = 16
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def build_hash(files: Mapping[str, bytes], base_ids: Sequence[str]) -> str:
    """Pure: the content hash of the image's inputs, its files and the exact base images (their ids,
    so a rebuilt base rebuilds the image). Names are length-prefixed so no two inputs collide."""
    digest = hashlib.sha256()
    for name in sorted(files):
        data = files[name]
        digest.update(f"file {len(name)} {name} {len(data)}\n".encode())
        digest.update(data)
    for ref in base_ids:
        digest.update(f"base {ref}\n".encode())
    return digest.hexdigest()[:HASH_LEN]


@dataclass(frozen=True)
class ImagePlan:
    """A ``build`` verb's arguments, checked: the tag, the base, and whether to make the Debian base first."""

    tag: str
    base: str
    build_base: bool  # run the image's build-base.sh first: only for the default Debian base


def plan_of(args: argparse.Namespace, default_tag: str, default_base: str) -> ImagePlan:
    """Pure: what ``--tag`` and ``--base`` ask for; a reference with spaces is refused (exit 2)."""
    tag = (args.tag or "").strip()
    if not tag or any(c.isspace() for c in tag):
        raise ConfigError(
            f"--tag {args.tag!r} is not an image reference; accepted: name[:tag], e.g. {default_tag}"
        )
    base = (args.base or "").strip() or None
    if base is not None and any(c.isspace() for c in base):
        raise ConfigError(f"--base {base!r} is not an image reference; accepted: name[:tag]")
    return ImagePlan(tag=tag, base=base or default_base, build_base=base is None)


def build_argv(plan: ImagePlan, *, build_hash_: str, context: Path) -> list[str]:
    """Pure: the ``docker build`` command line of a Dockerfile taking ``BASE`` and ``BUILD_HASH``."""
    return [
        "docker", "build",
        "--build-arg", f"BASE={plan.base}",
        "--build-arg", f"BUILD_HASH={build_hash_}",
        "-t", plan.tag,
        str(context),
    ]


def find_image_dir(rel: Path, what: str, start: Path | None = None) -> Path:
    """``rel`` (a folder holding a Dockerfile) in the repository this package is installed from (editable),
    searched upwards from ``start``."""
    here = (start or Path(__file__)).resolve()
    for folder in (here, *here.parents):
        if (folder / rel / "Dockerfile").is_file():
            return folder / rel
    raise ConfigError(
        f"no {rel}/Dockerfile above {here}; {what} build needs the repository checkout "
        "(pip install -e . from it)"
    )


def add_build_verb(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    verb: str, *, image: str, summary: str, base_help: str, default_tag: str,
    build: Callable[[argparse.Namespace], Awaitable[int]],
) -> argparse.ArgumentParser:
    """``pi-dispatch <verb> build [--base] [--tag] [--check]``; returns the ``build`` parser for more."""
    p = sub.add_parser(verb, help=f"build {summary}", description=f"Build {summary}.")
    verbs = p.add_subparsers(dest=f"{verb.replace('-', '_')}_command", metavar="VERB", required=True)
    b: argparse.ArgumentParser = verbs.add_parser(
        "build", help=f"build the {image}; skipped when nothing changed",
        description=f"Build the {image} with docker; nothing is rebuilt when its inputs are unchanged.",
    )
    b.add_argument("--base", default=None, help=base_help)
    b.add_argument("--tag", default=default_tag, help=f"the image's tag (default {default_tag})")
    b.add_argument("--check", action="store_true",
                   help="build nothing: exit 0 when the image is current for this tree, else 1")
    b.set_defaults(func=build)
    return b


def human_size(n: int) -> str:
    return f"{n / 1_000_000:.0f} MB"


def trusted_bundle(env: Mapping[str, str]) -> Path | None:
    """What this machine trusts, for package managers inside a build: ``NODE_EXTRA_CA_CERTS``, else
    ``SSL_CERT_FILE``, else the system bundle (a shell started clean still trusts what the machine trusts)."""
    for candidate in (env.get("NODE_EXTRA_CA_CERTS"), env.get("SSL_CERT_FILE"), SYSTEM_BUNDLE):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def write_context(files: Mapping[str, bytes], target: Path) -> None:
    """A build context from ``files`` (relative paths), plus this machine's trusted CA bundle when it has
    one, so the build's downloads trust what the builder trusts."""
    for name, data in files.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    extra_ca = trusted_bundle(os.environ)
    if extra_ca is not None:
        (target / EXTRA_CA_NAME).write_bytes(extra_ca.read_bytes())


async def stream(argv: Sequence[str], what: str) -> None:
    """Run ``argv``, copying its output line by line; a non-zero exit is an ``InfraError`` naming ``what``."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
    except OSError as exc:
        raise InfraError(f"{what}: cannot run {argv[0]}: {exc.strerror or exc}") from None
    assert proc.stdout is not None
    async for line in proc.stdout:
        sys.stdout.write(line.decode("utf-8", errors="replace"))
        sys.stdout.flush()
    code = await proc.wait()
    if code != 0:
        raise InfraError(f"{what} failed (exit {code}); its output is above")


async def capture(*argv: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode("utf-8", errors="replace").strip()


async def image_id(ref: str) -> str | None:
    code, out = await capture("docker", "image", "inspect", "-f", "{{.Id}}", ref)
    return out if code == 0 and out else None


async def tag_if_built(hash_: str, tag: str) -> bool:
    """Tag the image already built from these inputs, if there is one; True when so."""
    code, out = await capture(
        "docker", "images", "-q", "--no-trunc", "--filter", f"label={BUILD_HASH_LABEL}={hash_}"
    )
    existing = out.splitlines()[0] if code == 0 and out else None
    if existing is None:
        return False
    code, _ = await capture("docker", "tag", existing, tag)
    if code != 0:
        raise InfraError(f"docker tag {tag} failed")
    return True


async def report(what: str, tag: str, started: float, verb: str) -> None:
    _, size = await capture("docker", "image", "inspect", "-f", "{{.Size}}", tag)
    shown = human_size(int(size)) if size.isdigit() else "size unknown"
    print(f"{what}: {tag} {verb}: {shown}, {time.monotonic() - started:.0f} s")


async def check_current(what: str, tag: str, files: Mapping[str, bytes], bases: Sequence[str]) -> int:
    """``build --check``: 0 when ``tag`` was built from exactly these inputs (on the bases here now), else
    1, saying which; builds nothing."""
    base_ids = [await image_id(ref) or ref for ref in dict.fromkeys(bases)]
    hash_ = build_hash(files, base_ids)
    code, label = await capture("docker", "image", "inspect", "-f",
                                f'{{{{index .Config.Labels "{BUILD_HASH_LABEL}"}}}}', tag)
    if code == 0 and label == hash_:
        print(f"{what}: {tag} is up to date (build hash {hash_})")
        return 0
    state = "is not built" if code != 0 else f"was built from other inputs (build hash {label or 'none'})"
    print(f"{what}: {tag} {state}; this tree builds {hash_}: run pi-dispatch {what} build")
    return 1


async def build_unless_built(
    what: str, tag: str, files: Mapping[str, bytes], bases: Sequence[str],
    argv: Callable[[str, Path], list[str]], started: float,
) -> None:
    """``docker build`` (``argv(build hash, context)``) over a context made of ``files``, unless an image
    of the same inputs exists: then that one is tagged ``tag``. Says which, with the image's size."""
    # A base not here yet is pulled by docker build; its name stands in for its id in the hash.
    base_ids = [await image_id(ref) or ref for ref in dict.fromkeys(bases)]
    hash_ = build_hash(files, base_ids)
    if await tag_if_built(hash_, tag):
        print(f"{what}: nothing changed (build hash {hash_}); build skipped")
        await report(what, tag, started, "up to date")
        return
    with tempfile.TemporaryDirectory(prefix=f"pd-{what}-") as tmp:
        await asyncio.to_thread(write_context, files, Path(tmp))
        await stream(argv(hash_, Path(tmp)), "docker build")
    await report(what, tag, started, f"built (build hash {hash_})")


async def build_or_check(
    what: str, tag: str, files: Mapping[str, bytes], bases: Sequence[str],
    argv: Callable[[str, Path], list[str]], *, base_script: Path | None, check: bool,
) -> int:
    """A ``build`` verb's body: with ``check``, only say whether ``tag`` is current; otherwise make the
    Debian base first (``base_script``, itself skipped when current) and build unless built."""
    if shutil.which("docker") is None:
        raise InfraError(f"docker not found on PATH; {what} build needs the docker CLI and daemon")
    if check:
        return await check_current(what, tag, files, bases)
    started = time.monotonic()
    if base_script is not None:
        await stream(["sh", str(base_script)], base_script.name)
    await build_unless_built(what, tag, files, bases, argv, started)
    return 0
