"""`herald exec --exec-mode backend` and the `sandbox.exec_mode` setting, as a person runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERALD = [sys.executable, "-m", "herald"]
SCRIPT = (
    "import os, subprocess\n"
    "from hermes_tools import read_file, terminal\n"
    "open('made-by-open.txt', 'w').write('hi\\n')\n"
    "print(read_file('made-by-open.txt')['content'].strip())\n"
    "print(subprocess.run(['pwd'], capture_output=True, text=True).stdout.strip()\n"
    "      == terminal('pwd')['output'].strip())\n"
    "print(os.environ.get('HERALD_SANDBOX'))\n"
)


def herald(args: list[str], cwd: Path, home: Path, stdin: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, HERALD_DATA_DIR=str(home / "data"), HERALD_CONFIG=str(home / "config.toml"), **env)
    return subprocess.run(HERALD + args, cwd=cwd, env=environ, input=stdin, capture_output=True, text=True, timeout=120)


def test_exec_mode_flag_runs_the_script_in_the_backend(workspace: Path, home: Path) -> None:
    proc = herald(["exec", "-", "--exec-mode", "backend"], workspace, home, SCRIPT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "1|hi\nTrue\n1\n"
    assert (workspace / "made-by-open.txt").read_text() == "hi\n"


def test_exec_mode_from_the_config_file_and_environment(workspace: Path, home: Path) -> None:
    (home / "config.toml").write_text('[sandbox]\nexec_mode = "backend"\nremote_python = "python3-herald-missing"\n')
    proc = herald(["exec", "-"], workspace, home, "print(1)\n")
    assert proc.returncode == 2
    assert "`python3-herald-missing` was not found there" in proc.stderr
    # The environment wins over the file, and the flag over both.
    proc = herald(["exec", "-"], workspace, home, "print(1)\n", HERALD_SANDBOX_REMOTE_PYTHON="python3")
    assert proc.returncode == 0, proc.stderr
    proc = herald(["exec", "-", "--exec-mode", "host"], workspace, home, "import os\nprint(os.getcwd())\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(workspace)


def test_exec_mode_rejects_unknown_values(workspace: Path, home: Path) -> None:
    proc = herald(["exec", "-", "--exec-mode", "remote"], workspace, home, "print(1)\n")
    assert proc.returncode == 2 and "invalid choice: 'remote'" in proc.stderr
    (home / "config.toml").write_text('[sandbox]\nexec_mode = "container"\n')
    proc = herald(["exec", "-"], workspace, home, "print(1)\n")
    assert proc.returncode == 2 and "unknown exec_mode 'container'" in proc.stderr


def test_exec_over_ssh_runs_the_script_on_the_host(sshd: Any, workspace: Path, home: Path) -> None:
    remote = sshd.make_workspace()
    try:
        env = {"HERALD_SSH_" + key.split(".", 1)[1].upper(): str(value) for key, value in sshd.overrides().items()}
        proc = herald(
            ["exec", "-", "--backend", sshd.spec, "--cwd", remote, "--exec-mode", "backend"],
            workspace, home, SCRIPT + "import getpass\nprint(getpass.getuser(), os.getcwd())\n", **env,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == f"1|hi\nTrue\n1\n{sshd.user} {remote}\n"
        assert Path(remote, "made-by-open.txt").read_text() == "hi\n"  # the "host" is this machine
        assert not (workspace / "made-by-open.txt").exists()
    finally:
        sshd.remove_workspace(remote)
