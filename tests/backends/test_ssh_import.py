"""The SSH backend imports paramiko without invoke (herald/backends/ssh/lean.py), and leaves
invoke importable for anyone else. Each check in a fresh interpreter: imports are per process."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("paramiko")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_the_ssh_backend_does_not_import_invoke_but_leaves_it_importable() -> None:
    done = _python(
        "import sys, herald.backends.ssh\n"
        "print('invoke' in sys.modules)\n"
        "try:\n"
        "    import invoke\n"
        "except ImportError:\n"
        "    print('absent')\n"  # not installed here: nothing to hide, nothing to restore
        "else:\n"
        "    print(invoke.__name__)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() in (["False", "invoke"], ["False", "absent"])


def test_invoke_imported_first_is_left_alone() -> None:
    done = _python("import sys\ntry:\n    import invoke\nexcept ImportError:\n    raise SystemExit(0)\n"
                   "import herald.backends.ssh, paramiko.config\nprint(paramiko.config.invoke is invoke)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in ("True", "")
