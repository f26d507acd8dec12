"""The Runtime's hook for session checkpoints (herald/checkpoints/session.py): a snapshot before
each run; what it has to say (checkpoints turned off) joins the run's notes. Never fails a run."""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time

from ..backends.base import Backend, BackendError
from ..checkpoints.session import SessionCheckpoints
from ..config import Settings
from .sandbox.result import ExecutionResult, noted_error

log = logging.getLogger(__name__)


def new_checkpoint_session() -> str:
    """The checkpoint session of a Runtime no agent session owns (herald exec, herald mcp serve)."""
    return "exec-" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class RunCheckpoints:
    def __init__(self, backend: Backend, settings: Settings, session: str | None) -> None:
        self.session = session or new_checkpoint_session()
        self.points = SessionCheckpoints(backend, settings, self.session, backend_spec=settings.backend)

    def before_run(self, code: str) -> list[str]:
        try:
            return self.points.before_run(code)
        except (OSError, BackendError) as exc:  # a full disk here, a backend gone: the run goes on
            log.warning("checkpoint of session %s failed: %s", self.session, exc)
            return [f"No checkpoint was taken before this run: {exc}"]

    def close(self) -> None:
        self.points.close()

    @staticmethod
    def noted(result: ExecutionResult, notes: list[str]) -> ExecutionResult:
        if not notes:
            return result
        return dataclasses.replace(result, notes=[*result.notes, *notes], error=noted_error(result.error, notes))
