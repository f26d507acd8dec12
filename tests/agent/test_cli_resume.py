"""`herald run --resume ID` continues with the session's provider, model, base URL, backend and
working directory (flags given now win); an unknown id is the first error reported; `--cwd` is
checked where the backend is, not on this machine. Through `herald.cli.main`, in process."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from herald.cli import main
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY")
Herald = Callable[..., tuple[int, str, str]]


@pytest.fixture
def herald(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Herald:
    """`herald(*argv, cwd=..., **env)` -> (exit code, stdout, stderr), with its own data dir."""
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HERALD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HERALD_CONFIG", str(tmp_path / "config.toml"))

    def run(*argv: str, cwd: Path = workspace, **env: str) -> tuple[int, str, str]:
        with monkeypatch.context() as scoped:
            scoped.chdir(cwd)
            for key, value in env.items():
                scoped.setenv(key, value)
            capsys.readouterr()
            code = main(list(argv))
            out, err = capsys.readouterr()
        return code, out, err

    return run


def _result(out: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


def test_resume_reuses_the_sessions_provider_model_url_and_directory(herald: Herald, llm: FakeLLMServer,
                                                                     workspace: Path, tmp_path: Path) -> None:
    llm.script(reply("first answer"))
    code, out, err = herald("run", "start", "--json", "--provider", "openai", "--model", "first-model",
                            "--base-url", llm.openai_base_url, OPENAI_API_KEY="k")
    assert code == 0, err
    session = _result(out)["session_id"]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    llm.script(calls(call("terminal", command="pwd")), reply("second answer"))
    code, out, err = herald("run", "--resume", session, "where are you?", "--json", cwd=elsewhere, OPENAI_API_KEY="k")
    assert code == 0, err
    assert _result(out)["session_id"] == session
    assert llm.requests[1].body["model"] == "first-model"  # and the base URL: it reached this server
    [(_, pwd)] = llm.requests[2].tool_results()
    assert json.loads(pwd)["output"] == str(workspace)  # the session's directory, not the current one

    llm.script(reply("third answer"))
    code, out, err = herald("run", "--resume", session, "again", "--json", "--model", "second-model",
                            cwd=elsewhere, OPENAI_API_KEY="k")
    assert code == 0, err
    assert llm.requests[3].body["model"] == "second-model"  # a flag given now wins
    assert "first answer" in json.dumps(llm.requests[3].messages)


def test_unknown_session_is_reported_before_anything_else(herald: Herald, llm: FakeLLMServer) -> None:
    code, out, err = herald("run", "--resume", "nope", "x")  # no API key anywhere, no provider
    assert code == 2 and out == ""
    assert "no such session 'nope'" in err and "herald sessions" in err
    assert "API_KEY" not in err and "provider" not in err

    llm.script(reply("a session now exists"))
    assert herald("run", "hi", "--base-url", llm.openai_base_url, "--model", "m")[0] == 0
    code, _, err = herald("run", "--resume", "nope", "x", "--provider", "anthropic")
    assert code == 2 and "no such session 'nope'" in err and "herald sessions" in err and "API_KEY" not in err


def test_a_session_whose_directory_is_gone(herald: Herald, llm: FakeLLMServer, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    llm.script(reply("done"))
    code, out, _ = herald("run", "hi", "--json", "--base-url", llm.openai_base_url, "--model", "m", cwd=project)
    session = _result(out)["session_id"]
    project.rmdir()
    code, _, err = herald("run", "--resume", session, "more", cwd=tmp_path)
    assert code == 2
    assert f"the session's working directory {project}: no such directory" in err and "--cwd" in err


@pytest.mark.timeout(300)
def test_cwd_is_checked_in_the_container_not_here(herald: Herald, llm: FakeLLMServer, docker_engine_url: str,
                                                  docker_test_image: str, workspace: Path) -> None:
    remote = f"/srv/app-{uuid.uuid4().hex[:8]}"
    assert not Path(remote).exists()
    docker = ["-c", f"docker.host={docker_engine_url}", "-c", "docker.network=none"]
    llm.script(calls(call("terminal", command="pwd")), reply("in the container"))
    code, out, err = herald("run", "where?", "--json", "--backend", f"docker:{docker_test_image}", "--cwd", remote,
                            "--base-url", llm.openai_base_url, "--model", "m", *docker)
    assert code == 0, err
    [(_, pwd)] = llm.requests[1].tool_results()
    assert json.loads(pwd)["output"] == remote

    # Resumed: the same image and directory (in a new container), without saying so again.
    llm.script(calls(call("terminal", command="pwd; cat /etc/debian_version")), reply("again"))
    code, out, err = herald("run", "--resume", _result(out)["session_id"], "and now?", "--json", *docker)
    assert code == 0, err
    [(_, where)] = llm.requests[3].tool_results()
    assert json.loads(where)["output"].splitlines()[0] == remote
    session = _result(out)["session_id"]

    # `--backend local` is the default value, yet said on this command line it wins over the
    # session's docker backend (and the container's directory is not carried over).
    llm.script(calls(call("terminal", command="pwd")), reply("here"))
    code, out, err = herald("run", "--resume", session, "and here?", "--json", "--backend", "local")
    assert code == 0, err
    [(_, here)] = llm.requests[5].tool_results()
    assert json.loads(here)["output"] == str(workspace)


def test_a_missing_directory_on_an_ssh_host(herald: Herald, llm: FakeLLMServer, sshd: Any) -> None:
    missing = f"/nonexistent-{uuid.uuid4().hex[:8]}"
    settings = [arg for key, value in sshd.overrides().items() for arg in ("-c", f"{key}={json.dumps(value)}")]
    code, out, err = herald("run", "x", "--backend", sshd.spec, "--cwd", missing, "--base-url", llm.openai_base_url,
                            "--model", "m", *settings)
    assert code == 1 and out == ""
    assert "the ssh backend is not usable" in err and missing in err and "does not exist" in err
    assert llm.requests == []  # nothing was asked of the model
