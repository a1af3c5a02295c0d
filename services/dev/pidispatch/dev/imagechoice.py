"""Which image dev's jobs run in: the one configured, else ``pi-job:latest`` when it exists, else a tiny
demo image built from this machine's busybox (so the first run needs no registry)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from pidispatch.dev.banner import DEFAULT_IMAGE

DEMO_IMAGE = "pi-dispatch-demo:latest"
# The image label the worker's preflight reads (pidispatch.dev.demoimage.CAPABILITIES_LABEL).
DEMO_CAPABILITIES_LABEL = "dev.pi-dispatch.capabilities"
NO_DAEMON = ("pi-dispatch dev: no Docker daemon reachable; events are accepted and routed, and jobs wait "
             "in their stream until a daemon appears")


async def has_image(image: str) -> bool:
    """``image`` is on the daemon (False when no daemon answers: jobs wait for one anyway)."""
    import aiodocker

    try:
        docker = aiodocker.Docker()
    except Exception:
        return False
    try:
        return await asyncio.wait_for(image_exists(docker, image), 5)
    except Exception:
        return False
    finally:
        await docker.close()


async def job_image(env: dict[str, str], image: str) -> str:
    """The image jobs run in. With nothing configured and ``pi-job:latest`` absent, use (and if needed
    build) a tiny demo image from this machine's own binaries, so the first run needs no registry.
    """
    import aiodocker

    try:
        docker = aiodocker.Docker()
    except Exception:
        print(NO_DAEMON)
        return image
    try:
        try:
            await asyncio.wait_for(docker.version(), 3)
        except Exception:
            print(NO_DAEMON)
            return image
        if await image_exists(docker, image):
            return image
        if env.get("PI_JOB_IMAGE"):
            print(f"pi-dispatch dev: job image {image} is missing; jobs will be refused (job-image-missing). "
                  f"Build it, or run `pi-dispatch demo-image --tag {image}` for a demo image (no registry)")
            return image
        if not await demo_image_current(docker) and not await _build_demo_image(env):
            print("pi-dispatch dev: building the demo image failed; jobs will be refused until "
                  f"{DEFAULT_IMAGE} exists")
            return image
        return DEMO_IMAGE
    finally:
        await docker.close()


async def _build_demo_image(env: dict[str, str]) -> bool:
    print(f"pi-dispatch dev: {DEFAULT_IMAGE} is missing; building the demo image {DEMO_IMAGE} "
          "from this machine's busybox (no registry needed)")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pidispatch.common.cli", "demo-image", "--tag", DEMO_IMAGE, env=env
    )
    try:
        return await proc.wait() == 0
    except asyncio.CancelledError:  # Ctrl-C: the build must not outlive dev
        proc.kill()
        raise


async def demo_image_current(docker: object) -> bool:
    """The demo image exists and declares what the worker's preflight requires (one built by an older
    version lacks the ``anyUid`` capability label and every job would be refused)."""
    info = await _inspect(docker, DEMO_IMAGE)
    labels = ((info or {}).get("Config") or {}).get("Labels") or {}
    return "anyUid" in labels.get(DEMO_CAPABILITIES_LABEL, "").replace(" ", "").split(",")


async def image_exists(docker: object, ref: str) -> bool:
    return await _inspect(docker, ref) is not None


async def _inspect(docker: object, ref: str) -> dict[str, Any] | None:
    """The image's inspect data, or None when the daemon has no such image."""
    from aiodocker.exceptions import DockerError

    try:
        return await docker.images.inspect(ref)  # type: ignore[attr-defined,no-any-return]
    except DockerError as exc:
        if exc.status == 404:
            return None
        raise
