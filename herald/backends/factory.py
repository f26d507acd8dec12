"""Backend selection: one spec string for the CLI, the config file and the Python API.

    local                      this machine
    docker[:IMAGE]             a container per session (issue: remote backends)
    ssh://USER@HOST[:PORT]     a host over SSH
    modal[:IMAGE]              a Modal sandbox
"""

from __future__ import annotations

from ..config import Settings
from .base import Backend


class BackendSpecError(ValueError):
    """The backend spec cannot be understood; the message shows the accepted forms."""


FORMS = "local | docker[:IMAGE] | ssh://USER@HOST[:PORT] | modal[:IMAGE]"


def open_backend(spec: str, *, settings: Settings, cwd: str | None = None) -> Backend:
    """Create the backend `spec` names. Remote backends connect lazily, on first use."""
    kind = spec.split(":", 1)[0].strip().lower() if spec else "local"
    if kind == "local":
        from .local import LocalBackend

        return LocalBackend(cwd, settings=settings)
    if kind == "ssh":
        from .ssh.target import parse_ssh_spec

        try:
            target = parse_ssh_spec(spec.strip())
        except ValueError as exc:
            raise BackendSpecError(f"{exc} (backend forms: {FORMS})") from None
        from .ssh import SSHBackend

        return SSHBackend(target, cwd=cwd, settings=settings)  # cwd: a directory on the host
    if kind in ("docker", "modal"):
        image = spec.split(":", 1)[1].strip() if ":" in spec else ""  # the tag's ":" stays in IMAGE
        if kind == "docker":
            from .docker import DockerBackend

            return DockerBackend(image or None, settings=settings, cwd=cwd)  # cwd: in the container
        from .modal import ModalBackend

        return ModalBackend(image or None, settings=settings, cwd=cwd)  # cwd: in the sandbox
    raise BackendSpecError(f"unknown backend {spec!r}; use {FORMS}")
