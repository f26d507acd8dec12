"""The generated non-root user runs Herald: the attacker-style tests depend on it."""

from __future__ import annotations

import json

from tests.fixtures.users import User


def test_herald_runs_as_the_generated_user(nonroot: User) -> None:
    done = nonroot.herald("exec", "--json", "-", input="import os\nprint(os.getuid())\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"] == f"{nonroot.uid}\n"
