"""Tiny job images built from this machine's own binaries, imported without any registry.

``build_image`` packs a rootfs (busybox, or ``sh``/``cat``/``sleep``/``ls``/``id`` with their shared
libraries) plus an agent script into a tar in memory and imports it through the Engine API, the
equivalent of ``docker import --change 'CMD ["/bin/agent"]'``. The test suite and ``pi-dispatch
demo-image`` use it; real deployments bring their own ``PI_JOB_IMAGE``.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import tarfile
import time
from collections.abc import Mapping

import aiodocker
import aiohttp
from aiodocker.exceptions import DockerError

from pidispatch.common.errors import InfraError
from pidispatch.worker.engine import dockerapi
from pidispatch.worker.engine.preflight import CAPABILITIES_LABEL

BUSYBOX_APPLETS = ("sh", "cat", "echo", "ls", "id", "sleep", "grep", "sed", "printf", "mkdir", "date")
FALLBACK_TOOLS = ("sh", "cat", "sleep", "ls", "id")
IMPORT_TIMEOUT = aiohttp.ClientTimeout(total=300, connect=5, sock_connect=5)
_LDD_PATH = re.compile(r"(/\S+) \(0x[0-9a-f]+\)")

# Plays the agent for the tests: `pd-test exit=<n> sleep=<s>` in the prompt steers it. Shell builtins
# plus id and sleep only, so it also runs on the no-busybox fallback rootfs.
TEST_AGENT_SCRIPT = """#!/bin/sh
set -f
code=0
pause=0
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in
    *pd-test*)
      for word in $line; do
        case "$word" in
          exit=*) code="${word#exit=}" ;;
          sleep=*) pause="${word#sleep=}" ;;
        esac
      done ;;
  esac
done < /job/prompt.md
case "$code" in ''|*[!0-9]*) code=1 ;; esac
case "$pause" in ''|*[!0-9]*) pause=0 ;; esac
id -u > /workspace/agent-was-here
echo '{"event":"exit","turns":1,"tokens":{"input":1,"output":1,"total":2,"cost":0}}'
sleep "$pause"
exit "$code"
"""

# The first-run demo: shows what a job is given and that /workspace is writable, concludes. It writes
# nothing: on a local folder (`pi-dispatch run`) a file left behind would make the next run refuse the
# folder as having uncommitted changes.
DEMO_AGENT_SCRIPT = """#!/bin/sh
echo "pi-dispatch demo agent: this is what a job is given."
echo "--- /job/prompt.md"
cat /job/prompt.md
echo
echo "--- /job/event.json"
cat /job/event.json
echo "--- /workspace (a clone of the repository at its default branch's tip)"
ls -la /workspace
echo "--- /workspace/README.md"
cat /workspace/README.md 2>/dev/null || echo "(no README.md)"
echo "--- /workspace/.git/HEAD (the commit)"
cat /workspace/.git/HEAD 2>/dev/null || echo "(not a git clone)"
echo "--- /workspace is where an agent's edits land"
if [ -w /workspace ]; then
  echo "writable by this job's uid $(id -u)"
else
  echo "NOT writable by uid $(id -u)"
fi
echo '{"event":"exit","turns":0,"tokens":{"input":0,"output":0,"total":0,"cost":0}}'
exit 0
"""


def split_ref(ref: str) -> tuple[str, str]:
    """``repo[:tag]`` -> (repo, tag); a colon inside a registry host:port is not a tag."""
    if "@" in ref:
        raise ValueError("an image built here cannot carry a digest")
    repo, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, "latest"
    return repo, tag


async def _libraries(binaries: list[str]) -> set[str]:
    """Shared libraries ``ldd`` lists for the binaries (none for static ones)."""
    if not shutil.which("ldd"):
        return set()
    libs: set[str] = set()
    for binary in binaries:
        proc = await asyncio.create_subprocess_exec(
            "ldd", binary, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
        out, _ = await proc.communicate()
        if proc.returncode == 0:
            libs.update(_LDD_PATH.findall(out.decode(errors="replace")))
    return libs


def _host_tools() -> tuple[dict[str, str], list[str]]:
    """(name in /bin -> host file) and the applet symlinks; busybox when present, else single tools."""
    busybox = shutil.which("busybox")
    if busybox:
        return {"busybox": os.path.realpath(busybox)}, list(BUSYBOX_APPLETS)
    tools = {}
    for name in FALLBACK_TOOLS:
        found = shutil.which(name)
        if not found:
            raise InfraError(f"cannot build a job image: neither busybox nor {name} is on PATH")
        tools[name] = os.path.realpath(found)
    return tools, []


def _add_dir(tar: tarfile.TarFile, name: str, mode: int, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, mtime
    tar.addfile(info)


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, mtime
    tar.addfile(info, io.BytesIO(data))


def _rootfs_tar(tools: dict[str, str], applets: list[str], libs: set[str], agent_script: str) -> bytes:
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        # The root must be 0755, or a non-root user cannot start and --init fails with "permission denied".
        _add_dir(tar, ".", 0o755, now)
        for d, mode in (("bin", 0o755), ("tmp", 0o1777), ("job", 0o755), ("workspace", 0o755),
                        ("home", 0o755), ("home/pi", 0o777), ("etc", 0o755)):
            _add_dir(tar, d, mode, now)
        _add_file(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\npi:x:1000:1000:pi:/home/pi:/bin/sh\n",
                  0o644, now)
        _add_file(tar, "etc/group", b"root:x:0:\npi:x:1000:\n", 0o644, now)
        for name, host_path in tools.items():
            with open(host_path, "rb") as f:
                _add_file(tar, f"bin/{name}", f.read(), 0o755, now)
        for applet in applets:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, "busybox", 0o777, now
            tar.addfile(info)
        made = {"bin"}
        for lib in sorted(libs):
            parts = lib.strip("/").split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in made:
                    _add_dir(tar, parent, 0o755, now)
                    made.add(parent)
            with open(lib, "rb") as f:  # follows the host's symlink to the real library
                _add_file(tar, "/".join(parts), f.read(), 0o755, now)
        _add_file(tar, "bin/agent", agent_script.encode(), 0o755, now)
    return buf.getvalue()


def _import_errors(body: bytes) -> list[str]:
    errors = []
    for line in body.decode(errors="replace").splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict) and msg.get("error"):
            errors.append(str(msg["error"]))
    return errors


# The images built here run as whatever uid the worker hands them (the worker never runs one as root).
DEFAULT_LABELS: Mapping[str, str] = {CAPABILITIES_LABEL: "anyUid"}


async def build_image(
    tag: str,
    agent_script: str,
    docker: aiodocker.Docker | None = None,
    labels: Mapping[str, str] = DEFAULT_LABELS,
) -> None:
    """Build ``tag`` from this machine's binaries with ``agent_script`` as ``/bin/agent`` (the CMD)."""
    repo, version = split_ref(tag)
    tools, applets = _host_tools()
    libs = await _libraries(list(tools.values()))
    data = await asyncio.to_thread(_rootfs_tar, tools, applets, libs, agent_script)
    own = docker is None
    client = docker or aiodocker.Docker()
    try:
        # The daemon joins its `changes` with newlines and parses them as a Dockerfile, and aiodocker
        # sends each query parameter once, so every instruction travels in one value.
        label_lines = (f"LABEL {json.dumps(k)}={json.dumps(v)}" for k, v in labels.items())
        changes = ['CMD ["/bin/agent"]', *label_lines]
        params = {"fromSrc": "-", "repo": repo, "tag": version, "changes": "\n".join(changes)}
        # A file object is streamed; raw bytes would be written in one go.
        async with dockerapi.import_image(client, params, io.BytesIO(data), timeout=IMPORT_TIMEOUT) as resp:
            body = await resp.read()
        errors = _import_errors(body)
        if errors:
            raise InfraError(f"importing image {tag} failed: {errors[-1]}")
    except DockerError as exc:
        raise InfraError(f"importing image {tag} failed: {exc.message}") from None
    finally:
        if own:
            await client.close()
