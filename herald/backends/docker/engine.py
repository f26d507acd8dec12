"""Talking to the Docker engine: connect (failing fast and clearly), start a session's container
with secure defaults, find a kept one again, and reap containers whose Herald process died.

Every container Herald starts carries labels:
    herald.managed = "1"
    herald.owner   = "<hostname>:<boot id>:<pid>:<process start time>" of the Herald process
    herald.keep    = "1" for a named container kept for later runs, else "0"
    herald.name    = the name it is kept under (kept containers only)
A later run with the same `docker.name` reuses the kept container; the reaper removes
containers with keep=0 whose owner process (on this machine) no longer runs.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from ..._sandbox.procs.owners import start_time
from ...config import DockerSettings
from ..base import BackendError
from ..remote import IDLE_COMMAND

MANAGED = "herald.managed"
OWNER = "herald.owner"
KEEP = "herald.keep"
NAME = "herald.name"



def engine_url(settings: DockerSettings) -> str:
    return settings.host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect(settings: DockerSettings) -> Any:
    """An APIClient for a live engine, or BackendError within `docker.connect_timeout` seconds."""
    try:
        import docker
        from docker.utils import kwargs_from_env
    except ImportError:
        raise BackendError("the docker backend needs the docker package: pip install 'herald[docker]'") from None
    url = engine_url(settings)
    options: dict[str, Any] = kwargs_from_env() if not settings.host else {}
    options.pop("base_url", None)
    try:
        # version="auto" asks the engine for its API version: that request is the reachability check.
        api = docker.APIClient(base_url=url, version="auto", timeout=settings.connect_timeout, **options)
    except Exception as exc:
        raise BackendError(
            f"no Docker engine is reachable at {url} ({_reason(exc)}). Start one (dockerd, or "
            "`systemctl start docker`), or point the setting docker.host (or DOCKER_HOST) at a running engine."
        ) from None
    api.timeout = settings.api_timeout
    return api


def owner_label() -> str:
    return f"{socket.gethostname()}:{_boot_id()}:{os.getpid()}:{start_time(os.getpid()) or ''}"


def ensure_image(api: Any, image: str) -> None:
    """Pull `image` if the engine does not have it; a clear error if that fails."""
    try:
        api.inspect_image(image)
        return
    except Exception as exc:
        if getattr(exc, "status_code", None) != 404:
            raise BackendError(f"could not inspect image {image!r}: {_reason(exc)}") from None
    try:
        repository, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
        api.pull(repository, tag=tag or "latest")
        api.inspect_image(image)
    except Exception as exc:
        raise BackendError(
            f"image {image!r} is not on the Docker engine and pulling it failed ({_reason(exc)}). "
            "Pull, load or build it there first, or choose another image with docker:IMAGE or the setting docker.image."
        ) from None


def create_container(api: Any, settings: DockerSettings, image: str, workdir: str) -> str:
    """Create and start this session's container (or a kept one by name); return its id."""
    keep = bool(settings.name)
    labels = {MANAGED: "1", OWNER: owner_label(), KEEP: "1" if keep else "0"}
    if keep:
        labels[NAME] = settings.name
    host_config = api.create_host_config(
        # Nothing privileged by default; the few added capabilities are what root needs to act on
        # files it does not own (docker.cap_add; README explains each). no-new-privileges keeps
        # setuid binaries from gaining more.
        cap_drop=["ALL"],
        cap_add=list(settings.cap_add) or None,
        security_opt=["no-new-privileges"],
        pids_limit=settings.pids_limit or None,
        mem_limit=settings.memory or None,
        memswap_limit=settings.memory or None,
        nano_cpus=int(settings.cpus * 1e9) or None,
        tmpfs={"/tmp": f"rw,nosuid,nodev,size={settings.tmp_size}"} if settings.tmp_size else None,
        network_mode=settings.network or None,
        init=True,
    )
    try:
        created = api.create_container(
            image,
            command=IDLE_COMMAND,  # under docker-init (init=True), which reaps orphaned processes
            working_dir=workdir,  # created by Docker when missing
            labels=labels,
            host_config=host_config,
            name=f"herald-{settings.name}" if keep else None,
            user=settings.user or None,
            detach=True,
        )
        container: str = created["Id"]
        api.start(container)
    except Exception as exc:
        raise BackendError(f"could not start a container from {image!r}: {_reason(exc)}") from None
    return container


def find_kept(api: Any, name: str) -> dict[str, Any] | None:
    """The kept container named `name` (started again if it had stopped), or None."""
    try:
        info: dict[str, Any] = api.inspect_container(f"herald-{name}")
    except Exception as exc:
        if getattr(exc, "status_code", None) == 404:
            return None
        raise BackendError(f"could not look up container herald-{name}: {_reason(exc)}") from None
    if info.get("Config", {}).get("Labels", {}).get(MANAGED) != "1":
        raise BackendError(
            f"a container named herald-{name} exists but Herald did not create it; choose another docker.name"
        )
    if not info.get("State", {}).get("Running"):
        try:
            api.start(info["Id"])
        except Exception as exc:
            raise BackendError(f"could not restart the kept container herald-{name}: {_reason(exc)}") from None
    return info


def container_state(api: Any, container: str) -> dict[str, Any] | None:
    """The container's State record, or None once it no longer exists."""
    try:
        state: dict[str, Any] = api.inspect_container(container)["State"]
        return state
    except Exception:
        return None


def wait_until_stopped(api: Any, container: str, within: float) -> dict[str, Any] | None:
    """Poll the container's state for up to `within` s; the first record that is not running."""
    deadline = time.monotonic() + within
    while True:
        state = container_state(api, container)
        if state is None or not state.get("Running") or time.monotonic() >= deadline:
            return state
        time.sleep(0.05)


def describe_stop(state: dict[str, Any] | None) -> str:
    if state is None:
        return "was removed"
    if state.get("OOMKilled"):
        return "was killed for using more memory than its limit (setting docker.memory)"
    code = state.get("ExitCode")
    return f"stopped (exit code {code}: killed or stopped from outside)" if code else "stopped"


def remove_container(api: Any, container: str) -> None:
    try:
        api.remove_container(container, force=True)
    except Exception:
        pass  # already gone


def reap_orphans(api: Any) -> list[str]:
    """Remove this machine's unkept Herald containers whose owning process is gone."""
    try:
        candidates = api.containers(all=True, filters={"label": [f"{MANAGED}=1", f"{KEEP}=0"]})
    except Exception:
        return []
    host, boot = socket.gethostname(), _boot_id()
    removed = []
    for item in candidates:
        parts = item.get("Labels", {}).get(OWNER, "").split(":")
        if len(parts) != 4 or parts[0] != host:
            continue  # another machine's container: its owner cannot be checked from here
        same_boot = parts[1] == boot
        pid = int(parts[2]) if parts[2].isdigit() else 0
        if same_boot and pid and str(start_time(pid) or '') == parts[3]:
            continue  # the owner still runs
        remove_container(api, item["Id"])
        removed.append(item["Id"])
    return removed


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return "unknown"


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    text = str(text)
    for marker in ("FileNotFoundError", "ConnectionRefusedError", "Connection refused", "timed out", "No such file"):
        if marker in text:
            return {"FileNotFoundError": "no such socket", "No such file": "no such socket"}.get(
                marker, marker.replace("Error", "").lower()
            )
    return text.strip().splitlines()[0][:300]
