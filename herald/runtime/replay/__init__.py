"""Record and replay of runs (issue #30): every tool call of a run kept with its arguments and
outcome (recorder.py, sessions.py, in format.py's JSONL), and a run whose calls are answered from
such a recording instead of the tools (player.py). The Dispatcher's hook is its `tap` (calls.py
`CallTap`); the command line is herald/cli/replay.py."""

from __future__ import annotations

from .format import Recording, RecordingError, read_recording
from .player import MISMATCH, Player
from .recorder import RECORDING_SETTINGS, Recorder
from .sessions import SessionRecorder, recorded_runs, run_path

__all__ = ["MISMATCH", "RECORDING_SETTINGS", "Player", "Recorder", "Recording", "RecordingError",
           "SessionRecorder", "read_recording", "recorded_runs", "run_path"]
