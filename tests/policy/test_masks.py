"""One mask for the script and the tools: Herald's own files (config, transcripts, sessions, spill
files) and the credential stores are out of reach of file tools whatever the workspace is.

The attack: the workspace is the user's home (HOME points at a fake one, with Herald's config
and data dirs at their defaults inside), and the model tries to read the credentials, forge the
run's transcript and plant a config that would drop isolation for the next run: directly, from
a script (host mode, and backend mode on the local backend), by name and through links.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends.local import LocalBackend

from .conftest import SCRIPT_CALL, both

SECRET = "TOPSECRET-c0ffee"
MASKED = "Herald's own data or a credential store"


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    for name in (".ssh/id_ed25519", ".aws/credentials", ".netrc", "notes/plan.txt"):
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(f"{SECRET} {name}\n" if not name.startswith("notes") else "the plan\n")
    os.chmod(home / ".ssh/id_ed25519", 0o600)
    (home / "key-link").symlink_to(home / ".ssh/id_ed25519")
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "HERALD_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def home_runtime(fake_home: Path) -> Iterator[Callable[..., Runtime]]:
    """Runtimes whose workspace is the fake home, with Herald's data dir at its default there."""
    made: list[tuple[Runtime, LocalBackend]] = []

    def factory(exec_mode: str = "host", **overrides: Any) -> Runtime:
        settings = Settings().with_overrides(overrides)
        assert settings.data_dir == fake_home / ".local/share/herald"
        backend = LocalBackend(str(fake_home), settings=settings)
        runtime = Runtime(backend, settings=settings, transcript=True, exec_mode=exec_mode)
        made.append((runtime, backend))
        return runtime

    yield factory
    for runtime, backend in made:
        runtime.close()
        backend.close()


def _transcript(runtime: Runtime) -> Path:
    assert runtime.transcript is not None
    runtime.transcript.flush()
    return Path(runtime.transcript.path)


def _unchanged(home: Path) -> None:
    for name in (".ssh/id_ed25519", ".aws/credentials", ".netrc"):
        assert (home / name).read_text() == f"{SECRET} {name}\n"
    assert not (home / ".config/herald/config.toml").exists()


def _attempts(runtime: Runtime) -> list[tuple[str, dict[str, Any]]]:
    transcript = str(_transcript(runtime))
    return [
        ("read_file", {"path": ".ssh/id_ed25519"}),
        ("read_file", {"path": "~/.aws/credentials"}),
        ("read_file", {"path": ".netrc"}),
        ("read_file", {"path": "key-link"}),
        ("read_file", {"path": transcript}),
        (
            "write_file",
            {"path": ".config/herald/config.toml", "content": 'backend = "local"\n[sandbox]\nisolation = "none"\n'},
        ),
        ("write_file", {"path": transcript, "content": '{"type": "forged"}\n'}),
        ("write_file", {"path": "key-link", "content": "planted\n"}),
        ("patch", {"path": ".netrc", "old_string": SECRET, "new_string": "x"}),
        ("search_files", {"pattern": "anything", "path": ".ssh"}),
        ("search_files", {"pattern": "type", "path": ".local/share/herald"}),
    ]


@pytest.mark.parametrize("profile", ["workspace-write", "full"])
def test_file_tools_never_touch_herald_s_files_or_credentials(home_runtime: Callable[..., Runtime], fake_home: Path,
                                                             profile: str) -> None:
    runtime = home_runtime(**{"policy.profile": profile})
    assert both(runtime, "read_file", {"path": "notes/plan.txt"}).ok  # the home itself is the workspace
    before = _transcript(runtime).read_text()
    for name, args in _attempts(runtime):
        outcome = both(runtime, name, args)
        assert outcome.refused and MASKED in outcome.message, (name, args, outcome)
        assert SECRET not in outcome.message
    _unchanged(fake_home)
    text = _transcript(runtime).read_text()
    assert text.startswith(before) and '"forged"' not in text.replace('\\"forged\\"', "")
    # A search of the whole home finds nothing in them either.
    found = direct_result(runtime, "search_files", {"pattern": SECRET, "path": "."})
    assert found["count"] == 0, found
    found = direct_result(runtime, "search_files", {"pattern": "*", "target": "files", "path": "."})
    assert all(not p.startswith((".ssh", ".aws", ".local", ".config")) for p in found["files"]), found


def test_backend_mode_applies_the_same_masks(home_runtime: Callable[..., Runtime], fake_home: Path) -> None:
    runtime = home_runtime(exec_mode="backend")
    for name, args in _attempts(runtime):
        result = runtime.execute(SCRIPT_CALL.format(name=name, args=json.dumps(args)), timeout=120)
        assert result.status == "success", result
        out = json.loads(result.output)
        assert not out["ok"] and out["type"] == "PolicyRefused" and MASKED in out["message"], (name, out)
    _unchanged(fake_home)


def test_a_root_named_in_policy_roots_lifts_the_mask_there_only(home_runtime: Callable[..., Runtime],
                                                               fake_home: Path) -> None:
    runtime = home_runtime(**{"policy.roots": [str(fake_home / ".ssh")]})
    assert both(runtime, "read_file", {"path": ".ssh/id_ed25519"}).ok
    outcome = both(runtime, "read_file", {"path": ".aws/credentials"})
    assert outcome.refused and MASKED in outcome.message


def direct_result(runtime: Runtime, name: str, args: dict[str, Any]) -> Any:
    reply = runtime.dispatcher.call_direct(name, args)
    assert "result" in reply, reply
    return reply["result"]

