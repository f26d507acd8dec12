"""`herald doctor` rows for the remote backends: usable here, or why not.

Each check answers (ok, detail): True when the backend works here; False when it does not and it
is the backend the settings select (so `herald doctor` fails); None when an unselected backend
cannot be used here, or cannot be checked without more configuration.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable
from pathlib import Path

from ..config import Settings
from .base import BackendError

Check = tuple[bool | None, str]


def _verdict(usable: bool, selected: bool) -> bool | None:
    return True if usable else (False if selected else None)


def check_ssh(settings: Settings) -> Check:
    spec = settings.backend.strip()
    selected = spec.startswith("ssh://")
    if importlib.util.find_spec("paramiko") is None:
        return _verdict(False, selected), "paramiko is not installed: pip install 'herald[ssh]'"
    if not selected:
        return None, 'paramiko installed; no host configured to check (backend = "ssh://USER@HOST[:PORT]")'
    from .ssh import SSHBackend

    try:
        started = time.monotonic()
        with SSHBackend(spec, settings=settings) as backend:
            backend.connect()
            connected = time.monotonic() - started
            result = backend.run("echo ok", timeout=settings.ssh.connect_timeout or 30)
    except (BackendError, ValueError) as exc:
        return False, f"{spec}: {exc}"
    if result.output != "ok":
        return False, f"{spec}: the shell answered {result.output[:200]!r} (exit {result.exit_code})"
    return (
        True,
        f"{spec} reachable: connected in {connected * 1000:.0f} ms, "
        f"shell round trip {result.duration_seconds * 1000:.1f} ms",
    )


def check_docker(settings: Settings) -> Check:
    selected = settings.backend.strip().lower().split(":", 1)[0] == "docker"
    if importlib.util.find_spec("docker") is None:
        return _verdict(False, selected), "the docker package is not installed: pip install 'herald[docker]'"
    from .docker.engine import connect, engine_url

    try:
        api = connect(settings.docker)
        version = api.version().get("Version", "?")
        api.close()
    except BackendError as exc:
        return _verdict(False, selected), str(exc)
    except Exception as exc:
        return _verdict(False, selected), f"the Docker engine at {engine_url(settings.docker)} failed: {exc}"
    return True, f"engine {version} reachable at {engine_url(settings.docker)}"


def _modal_credentials() -> str:
    """Where Modal credentials were found, or "" (the Modal cloud is not contacted)."""
    if os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET"):
        return "MODAL_TOKEN_ID/MODAL_TOKEN_SECRET"
    config = Path(os.environ.get("MODAL_CONFIG_PATH") or Path.home() / ".modal.toml")
    try:
        text = config.read_text(encoding="utf-8")
    except OSError:
        return ""
    return str(config) if "token_id" in text and "token_secret" in text else ""


def check_modal(settings: Settings) -> Check:
    selected = settings.backend.strip().lower().split(":", 1)[0] == "modal"
    if importlib.util.find_spec("modal") is None:
        return _verdict(False, selected), "the modal package is not installed: pip install 'herald[modal]'"
    found = _modal_credentials()
    if not found:
        return _verdict(
            False, selected
        ), "no Modal credentials: run `modal token new`, or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"
    return True, f"credentials found in {found} (doctor does not contact Modal's cloud)"


CHECKS: dict[str, Callable[[Settings], Check]] = {"ssh": check_ssh, "docker": check_docker, "modal": check_modal}


def backend_checks(settings: Settings) -> list[tuple[str, bool | None, str]]:
    """(name, ok, detail) for every remote backend, in a stable order."""
    rows = []
    for name, check in CHECKS.items():
        try:
            ok, detail = check(settings)
        except Exception as exc:  # a check must not take doctor down with it
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        rows.append((name, ok, detail))
    return rows
