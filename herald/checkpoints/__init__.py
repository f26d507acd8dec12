"""Workspace snapshots (the engine runs where the workspace is) and session checkpoints."""

from .snapshots import Changes, SnapshotError, SnapshotInfo, Snapshots, WorkspaceTooLarge, snapshots_for

__all__ = ["Changes", "SnapshotError", "SnapshotInfo", "Snapshots", "WorkspaceTooLarge", "snapshots_for"]
