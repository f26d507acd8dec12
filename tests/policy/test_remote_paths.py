"""Path confinement on a remote backend (a real sshd on 127.0.0.1): paths are resolved there
(`..`, absolute paths; symlinks: test_remote_links.py), relative to the shell's current
directory; the workspace is where the session started, fixed by its first call before any `cd`."""

from __future__ import annotations

import os
from typing import Any

from .conftest import MakeRuntime, both, direct


def test_ssh_workspace_write_confines_paths(make_runtime: MakeRuntime, ssh_backend: Any, sshd: Any) -> None:
    runtime = make_runtime(backend=ssh_backend, overrides=sshd.overrides())
    assert direct(runtime, "write_file", {"path": "notes.txt", "content": "hi\n"}).ok  # fixes the workspace
    work = ssh_backend.cwd
    assert both(runtime, "read_file", {"path": "notes.txt"}).ok
    assert both(runtime, "read_file", {"path": f"{work}/notes.txt"}).ok
    for path in ["../x.txt", "/etc/hostname", f"{work}/../x.txt", "~/x.txt"]:
        outcome = both(runtime, "read_file", {"path": path})
        assert outcome.refused and "outside the workspace" in outcome.message, (path, outcome)
    assert direct(runtime, "terminal", {"command": "cd /etc"}).ok
    outcome = both(runtime, "read_file", {"path": "hostname"})
    assert outcome.refused and f"({work})" in outcome.message
    assert not os.path.exists(os.path.join(os.path.dirname(work), "x.txt"))
