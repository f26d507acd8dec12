"""Spill files: one cap on what a run writes to them in all, and removal after the retention."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from herald import Settings
from herald.config import ConfigError, load_settings

from ._helpers import run_ok

CAP = 200_000


def spilled_bytes(spill_dir: Path) -> int:
    return sum(path.stat().st_size for path in spill_dir.iterdir()) if spill_dir.exists() else 0


def test_a_runs_spill_files_share_one_cap(make_runtime: Any, settings: Settings) -> None:
    """Output and terminal commands past their caps spill; together never beyond the run's cap
    (one run of 12 large terminal commands used to leave 3 GiB)."""
    runtime = make_runtime(
        overrides={"sandbox.max_spill_bytes": CAP, "sandbox.max_stdout_bytes": 1000, "terminal.max_output_bytes": 1000},
        transcript=False,
    )
    result = run_ok(
        runtime,
        """
        from hermes_tools import terminal
        print("x" * 150_000)
        for _ in range(3):
            out = terminal("head -c 150000 /dev/zero | tr '\\\\0' y")
        print("cut" if "not spilled: the run's spill cap" in out["output"] else out["output"][-300:])
        """,
    )
    assert spilled_bytes(settings.spill_dir) <= CAP
    assert spilled_bytes(settings.spill_dir) >= 150_000  # the script's own output spilled first
    assert any("sandbox.max_spill_bytes" in note for note in result.notes), result.notes
    assert result.output.rstrip().endswith("cut")  # the last command's marker says why it has no file
    # The cap is per run: the next run spills again.
    before = spilled_bytes(settings.spill_dir)
    again = run_ok(runtime, "print('z' * 5000)")
    assert again.output_spill_path is not None
    assert spilled_bytes(settings.spill_dir) == before + 5001
    assert not any("max_spill_bytes" in note for note in again.notes)


def test_no_spill_files_with_a_zero_cap(make_runtime: Any, settings: Settings) -> None:
    runtime = make_runtime(overrides={"sandbox.max_spill_bytes": 0, "sandbox.max_stdout_bytes": 100}, transcript=False)
    result = run_ok(runtime, "print('x' * 10_000)")
    assert result.output.startswith("x" * 40)  # the head and tail are still there
    assert spilled_bytes(settings.spill_dir) == 0 and result.output_spill_path is None
    assert "not spilled: the run's spill cap is reached" in result.output
    assert any("sandbox.max_spill_bytes" in note for note in result.notes)


def test_old_spill_files_are_removed_when_a_runtime_starts(make_runtime: Any, settings: Settings) -> None:
    spill_dir = settings.spill_dir
    spill_dir.mkdir(parents=True)
    old, fresh = spill_dir / "old-stdout.txt", spill_dir / "fresh-stdout.txt"
    for path in (old, fresh):
        path.write_text("output")
    week_ago = time.time() - 8 * 24 * 3600
    os.utime(old, (week_ago, week_ago))
    keep = spill_dir / "kept-dir"
    keep.mkdir()
    os.utime(keep, (week_ago, week_ago))
    make_runtime(overrides={"sandbox.spill_retention": 0}, transcript=False)  # 0: kept for ever
    assert old.exists()
    make_runtime(transcript=False)  # the default: 7 days
    assert not old.exists()
    assert fresh.exists() and keep.exists()  # only files older than the retention go


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "must be zero or more"),
        ("soon", "must be a number"),
        ("inf", "must be a finite number"),
    ],
)
@pytest.mark.parametrize("key", ["max_spill_bytes", "spill_retention"])
def test_spill_settings_are_validated(key: str, value: str, message: str) -> None:
    if key == "max_spill_bytes" and value == "inf":
        message = "must be a number"  # an int setting never reads "inf"
    name = f"HERALD_SANDBOX_{key.upper()}"
    with pytest.raises(ConfigError, match=f"{name}.*{message}"):
        load_settings(env={"HERALD_CONFIG": "/nonexistent.toml", name: value})


def test_spill_settings_defaults_and_environment() -> None:
    defaults = load_settings(env={"HERALD_CONFIG": "/nonexistent.toml"}).sandbox
    assert (defaults.max_spill_bytes, defaults.spill_retention) == (256 * 1024 * 1024, 7 * 24 * 3600.0)
    env = {
        "HERALD_CONFIG": "/nonexistent.toml",
        "HERALD_SANDBOX_SPILL_RETENTION": "3600",
        "HERALD_SANDBOX_MAX_SPILL_BYTES": "1000",
    }
    chosen = load_settings(env=env).sandbox
    assert (chosen.max_spill_bytes, chosen.spill_retention) == (1000, 3600.0)
