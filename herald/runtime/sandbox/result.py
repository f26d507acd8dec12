"""The one result type of a script run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["success", "error", "timeout", "interrupted"]


@dataclass(frozen=True)
class ExecutionResult:
    status: Status
    output: str  # the script's stdout, capped head + tail
    error: str  # stderr / traceback / what Herald did (timeout, limits), capped
    exit_code: int | None  # None: never ran; 143 after the SIGTERM of a timeout/interrupt; -N: killed by signal N
    tool_calls_made: int
    duration_seconds: float
    output_spill_path: str | None = None  # full stdout when it was cut
    error_spill_path: str | None = None  # full stderr when it was cut
    session: str | None = None  # kernel session name, if any
    state_lost: bool = False  # the kernel session's variables are gone (timeout, crash, reset)
    # What Herald itself says about the run (timeout, refused calls, lost state); also at the end
    # of `error`. Kept apart so a live view that already streamed stderr can show just these.
    notes: list[str] = field(default_factory=list)
    isolation: str = ""  # what confined the script: "bwrap (no network)", "none (why)", ... (isolation.py)
    profile: str = ""  # the permission profile its tool calls ran under (herald/policy/)
    budgets: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # name -> {limit, used, refused} (policy/budgets.py)
    # Calls of the script that Herald refused to run (the call limit, a budget, the permission
    # policy): each raised ToolError in the script, which may have caught it, so a `success`
    # with refused calls may be incomplete. `notes` says which and why.
    refused_calls: int = 0
    budget_exhausted: bool = False  # the call limit or a budget refused a call: the work did not fit

    @property
    def ok(self) -> bool:
        return self.status == "success"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def noted_error(error: str, notes: Sequence[str]) -> str:
    """A result's `error` with Herald's notes after what the script wrote there, one a line."""
    return (error.rstrip("\n") + "\n" if error.strip() else "") + "\n".join(notes)
