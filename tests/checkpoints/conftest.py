"""`snap_backend`: the snapshot tests against every backend that can run here (local, SSH,
Docker), each kind skipped with its reason when its service cannot run; and `tree`, which builds
and reads workspace trees on that backend (tests/checkpoints/trees.py run there)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from herald.backends import Backend

from . import trees

KINDS = ["local", "ssh", "docker"]
_SOURCE = Path(trees.__file__).read_text()


@pytest.fixture(params=KINDS)
def snap_backend(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_backend")


class Tree:
    """Runs trees.py's actions where `backend`'s workspace is."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.root = backend.cwd

    def __call__(self, action: str, root: str | None = None) -> Any:
        command = f"python3 -c {shlex.quote(_SOURCE)} {action} {shlex.quote(root or self.root)}"
        result = self.backend.run(command, timeout=300)
        assert result.exit_code == 0, result.output[-2000:]
        line = next(line for line in result.output.splitlines() if line.startswith("TREE "))
        return json.loads(line[5:])


@pytest.fixture
def tree(snap_backend: Backend) -> Tree:
    return Tree(snap_backend)
