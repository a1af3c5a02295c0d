"""``pi-dispatch job-image build``: the job image (the real pi plus ``images/job/runner.mjs``) in one command.

Without ``--base`` it first runs ``images/job/build-base.sh``, which makes the Debian bases from a package
mirror alone (no image registry). Then ``docker build`` of ``images/job``; a build whose inputs did not
change is skipped: the image carries the content hash in its ``dev.pi-dispatch.build-hash`` label.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pidispatch.common.errors import ConfigError, InfraError

DEFAULT_TAG = "pi-job:latest"
DEFAULT_BASE = "pd-job-base:trixie"
DEFAULT_RUNTIME = "pd-job-runtime:trixie"
BUILD_HASH_LABEL = "dev.pi-dispatch.build-hash"
IMAGE_DIR = Path("images") / "job"
BASE_SCRIPT = "build-base.sh"
# The builder's extra CA bundle goes into the build context under this name (the Dockerfile's build
# stage hands it to npm); it is never part of the hash: it changes how pi is fetched, not what is built.
EXTRA_CA_NAME = "extra-ca.pem"
HASH_LEN = 16
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


@dataclass(frozen=True)
class BuildPlan:
    tag: str
    base: str
    runtime: str
    build_base: bool  # run build-base.sh first: only for the default Debian bases


def plan(args: argparse.Namespace) -> BuildPlan:
    """Pure: what ``args`` ask for. ``--base`` alone serves both stages (a node image has npm)."""
    tag = (args.tag or "").strip()
    if not tag or any(c.isspace() for c in tag):
        raise ConfigError(
            f"--tag {args.tag!r} is not an image reference; accepted: name[:tag], e.g. {DEFAULT_TAG}"
        )
    base = (args.base or "").strip() or None
    runtime = (args.runtime or "").strip() or None
    for flag, value in (("--base", base), ("--runtime", runtime)):
        if value is not None and any(c.isspace() for c in value):
            raise ConfigError(f"{flag} {value!r} is not an image reference; accepted: name[:tag]")
    if base is None and runtime is not None:
        raise ConfigError("--runtime needs --base; accepted: --base IMAGE [--runtime IMAGE]")
    if base is None:
        return BuildPlan(tag=tag, base=DEFAULT_BASE, runtime=DEFAULT_RUNTIME, build_base=True)
    return BuildPlan(tag=tag, base=base, runtime=runtime or base, build_base=False)


def find_image_dir(start: Path | None = None) -> Path:
    """``images/job`` in the repository this package is installed from (editable), searched upwards."""
    here = (start or Path(__file__)).resolve()
    for folder in (here, *here.parents):
        candidate = folder / IMAGE_DIR
        if (candidate / "Dockerfile").is_file():
            return candidate
    raise ConfigError(
        f"no {IMAGE_DIR}/Dockerfile above {here}; job-image build needs the repository checkout "
        "(pip install -e . from it)"
    )


def context_files(image_dir: Path) -> dict[str, bytes]:
    """The files a build depends on: everything directly in ``images/job`` but a stray CA bundle."""
    return {
        p.name: p.read_bytes()
        for p in sorted(image_dir.iterdir())
        if p.is_file() and p.name != EXTRA_CA_NAME
    }


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


def build_argv(plan_: BuildPlan, *, build_hash_: str, context: Path) -> list[str]:
    """Pure: the ``docker build`` command line."""
    return [
        "docker", "build",
        "--build-arg", f"BASE={plan_.base}",
        "--build-arg", f"RUNTIME={plan_.runtime}",
        "--build-arg", f"BUILD_HASH={build_hash_}",
        "-t", plan_.tag,
        str(context),
    ]


def human_size(n: int) -> str:
    return f"{n / 1_000_000:.0f} MB"


async def _stream(argv: Sequence[str], what: str) -> None:
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


async def _capture(*argv: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode("utf-8", errors="replace").strip()


async def _image_id(ref: str) -> str | None:
    code, out = await _capture("docker", "image", "inspect", "-f", "{{.Id}}", ref)
    return out if code == 0 and out else None


async def _image_with_hash(hash_: str) -> str | None:
    code, out = await _capture(
        "docker", "images", "-q", "--no-trunc", "--filter", f"label={BUILD_HASH_LABEL}={hash_}"
    )
    return out.splitlines()[0] if code == 0 and out else None


async def _report(tag: str, started: float, verb: str) -> None:
    _, size = await _capture("docker", "image", "inspect", "-f", "{{.Size}}", tag)
    shown = human_size(int(size)) if size.isdigit() else "size unknown"
    print(f"job-image: {tag} {verb}: {shown}, {time.monotonic() - started:.0f} s")


def _make_context(image_dir: Path, files: Mapping[str, bytes], target: Path) -> None:
    """The build context: ``images/job`` plus, when the builder trusts an extra CA (a TLS-intercepting
    proxy), that bundle, so npm inside the build trusts it too."""
    for name, data in files.items():
        (target / name).write_bytes(data)
    extra_ca = trusted_bundle(os.environ)
    if extra_ca is not None:
        shutil.copyfile(extra_ca, target / EXTRA_CA_NAME)


def trusted_bundle(env: Mapping[str, str]) -> Path | None:
    """What this machine trusts, for npm inside the build: ``NODE_EXTRA_CA_CERTS``, else ``SSL_CERT_FILE``,
    else the system bundle (a shell started clean still trusts what the machine trusts)."""
    for candidate in (env.get("NODE_EXTRA_CA_CERTS"), env.get("SSL_CERT_FILE"), SYSTEM_BUNDLE):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


async def build(args: argparse.Namespace) -> int:
    plan_ = plan(args)
    image_dir = await asyncio.to_thread(find_image_dir)
    if shutil.which("docker") is None:
        raise InfraError("docker not found on PATH; job-image build needs the docker CLI and daemon")
    started = time.monotonic()
    if plan_.build_base:
        await _stream(["sh", str(image_dir / BASE_SCRIPT)], BASE_SCRIPT)
    base_ids = []
    for ref in dict.fromkeys((plan_.base, plan_.runtime)):
        image_id = await _image_id(ref)
        # A base not here yet is pulled by docker build; its name stands in for its id in the hash.
        base_ids.append(image_id or ref)
    files = await asyncio.to_thread(context_files, image_dir)
    hash_ = build_hash(files, base_ids)
    existing = await _image_with_hash(hash_)
    if existing is not None:
        code, _ = await _capture("docker", "tag", existing, plan_.tag)
        if code != 0:
            raise InfraError(f"docker tag {plan_.tag} failed")
        print(f"job-image: nothing changed (build hash {hash_}); build skipped")
        await _report(plan_.tag, started, "up to date")
        return 0
    with tempfile.TemporaryDirectory(prefix="pd-job-image-") as tmp:
        await asyncio.to_thread(_make_context, image_dir, files, Path(tmp))
        await _stream(build_argv(plan_, build_hash_=hash_, context=Path(tmp)), "docker build")
    await _report(plan_.tag, started, f"built (build hash {hash_})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("job-image", help="build the job image (pi and its runner)")
    verbs = p.add_subparsers(dest="job_image_command", metavar="VERB", required=True)
    b = verbs.add_parser("build", help="build the job image; skipped when nothing changed")
    b.add_argument(
        "--base", default=None,
        help="image with node >= 20.6 and npm to build on (default: the Debian base from build-base.sh)",
    )
    b.add_argument(
        "--runtime", default=None, help="image for the final stage (default: the same as --base)"
    )
    b.add_argument("--tag", default=DEFAULT_TAG, help=f"the image's tag (default {DEFAULT_TAG})")
    b.set_defaults(func=build)
