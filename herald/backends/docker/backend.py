"""The Docker backend: a container per session, commands in a persistent bash over an exec
socket, files through a second shell in the same container (`ExecSessionBackend`).

The container is created on first use (so opening the backend is free) with the secure defaults
in `engine.create_container`. If it dies under a call (killed, out of memory), that call fails
with a message saying so, and the next call starts a fresh container from the same image.
"""

from __future__ import annotations

from typing import Any

from ...config import Settings
from ..execbackend import ExecSessionBackend
from . import engine
from .channel import ExecChannel


class DockerBackend(ExecSessionBackend):
    """Commands and files in one container; thread-safe like every backend."""

    name = "docker"
    kind_of_sandbox = "container"

    def __init__(self, image: str | None = None, *, settings: Settings | None = None, cwd: str | None = None) -> None:
        settings = settings or Settings()
        self.options = settings.docker
        super().__init__(image or self.options.image, settings=settings, cwd=cwd or self.options.workdir or "/")
        self._api: Any = None
        self.container_id = ""

    def _sandbox_ready(self) -> str:
        if self._api is None:
            self._api = engine.connect(self.options)
        if not self.container_id:
            engine.reap_orphans(self._api)
            kept = engine.find_kept(self._api, self.options.name) if self.options.name else None
            if kept is not None:
                self.container_id = kept["Id"]
            else:
                engine.ensure_image(self._api, self.image)
                self.container_id = engine.create_container(self._api, self.options, self.image, self._cwd)
            self._sandbox_started(self.container_id[:12])
        return self.container_id[:12]

    def _start_process(self, argv: list[str], cwd: str | None) -> ExecChannel:
        return ExecChannel(
            self._api,
            self.container_id,
            argv,
            cwd=cwd,
            environment=self._env,
            user=self.options.user,
            grace=self._grace,
            on_eof=self._check_alive,
        )

    def _sandbox_gone(self) -> str | None:
        state = engine.container_state(self._api, self.container_id) if self.container_id else None
        return None if state is not None and state.get("Running") else engine.describe_stop(state)

    def _check_alive(self, channel: ExecChannel) -> None:
        """A process's output ended: find out whether the container went with it."""
        api, container = self._api, self.container_id
        if api is None or not container:
            return
        code = channel.returncode
        # A container being killed takes its processes first; its own state follows shortly.
        # If it has not shown yet, the next call's exec fails and finds out then.
        within = 0.5 if code is None or code < 0 else 0.0
        state = engine.wait_until_stopped(api, container, within)
        if state is None or not state.get("Running"):
            self._found_lost(engine.describe_stop(state), container[:12])

    def _discard_sandbox(self, *, remove: bool) -> None:
        if remove and self.container_id and self._api is not None:
            engine.remove_container(self._api, self.container_id)
        self.container_id = ""

    def _remove_on_close(self) -> bool:
        return not self.options.name  # a named container is kept for later runs

    def __enter__(self) -> DockerBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
