"""Scripts that run inside the backend (exec_mode "backend") get the same answers: their tool
calls come back to the same Dispatcher, whatever carries them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from herald import Runtime
from herald.backends.local import LocalBackend

from .conftest import scripted

CASES = [
    ("read_file", {"path": "a.txt"}, set()),
    ("read_file", {"path": "/etc/hostname"}, {"read-only", "workspace-write"}),
    ("write_file", {"path": "b.txt", "content": "x"}, {"read-only"}),
    ("terminal", {"command": "cat a.txt | wc -l"}, set()),
    ("terminal", {"command": "touch c.txt"}, {"read-only"}),
]


@pytest.mark.parametrize("profile", ["read-only", "workspace-write", "full"])
def test_backend_mode_scripts_pass_the_same_policy(
    profile: str, workspace: Path, local_backend: LocalBackend, make_runtime: Callable[..., Runtime]
) -> None:
    (workspace / "a.txt").write_text("a\n")
    runtime = make_runtime(backend=local_backend, exec_mode="backend", policy=profile)
    for name, args, refused_in in CASES:
        outcome = scripted(runtime, name, args)
        assert outcome.refused == (profile in refused_in), (profile, name, outcome)
    assert (workspace / "b.txt").exists() == (profile != "read-only")
