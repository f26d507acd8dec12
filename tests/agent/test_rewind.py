"""`herald run --resume ID "/rewind [N]"`: the agent session's workspace back as it was before
run N, said to the person and put in the session's history, so the model sees it next turn.
Through `herald.cli.main`, in process, against the scripted LLM server."""

from __future__ import annotations

import json
from pathlib import Path

from herald.agent.sessions import find_session, read_session
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

from .test_cli_resume import Herald, herald  # noqa: F401  (the fixture)

FIRST = "from hermes_tools import write_file\nwrite_file('a.txt', 'v1\\n')"
QUIET = {"HERALD_SANDBOX_WARM_TOOLS": "named"}  # no Chromium started ahead for a model's session
SECOND = "from hermes_tools import write_file, terminal\nwrite_file('a.txt', 'v2\\n')\nterminal('echo b > b.txt')"


def test_rewind_restores_before_a_run_and_tells_the_model(herald: Herald, llm: FakeLLMServer,  # noqa: F811
                                                          workspace: Path, tmp_path: Path) -> None:
    llm.script(calls(call("execute_code", code=FIRST)), calls(call("execute_code", code=SECOND)), reply("done"))
    code, out, err = herald("run", "write the files", "--json", "--provider", "openai", "--model", "m",
                            "--base-url", llm.openai_base_url, OPENAI_API_KEY="k", **QUIET)
    assert code == 0, err
    session = json.loads(out.splitlines()[-1])["session_id"]
    assert (workspace / "a.txt").read_text() == "v2\n" and (workspace / "b.txt").exists()

    code, out, err = herald("checkpoints", "list", "--session", session)
    assert code == 0, err
    assert "before run 1" in out and "before run 2" in out

    code, out, err = herald("run", "--resume", session, "/rewind 2")
    assert code == 0, err
    assert f"to before run 2 (session {session})" in out and "rewritten: a.txt" in out and "removed: b.txt" in out
    assert (workspace / "a.txt").read_text() == "v1\n" and not (workspace / "b.txt").exists()
    assert len(llm.requests) == 3  # no model was called

    state = read_session(find_session(tmp_path / "data" / "sessions", session))
    assert state.messages[-1]["role"] == "user"
    assert "The person rewound the workspace" in str(state.messages[-1]["content"])

    llm.script(reply("noted"))
    code, out, err = herald("run", "--resume", session, "what happened?", "--json", OPENAI_API_KEY="k", **QUIET)
    assert code == 0, err
    assert "The person rewound the workspace" in json.dumps(llm.requests[-1].messages)

    code, out, err = herald("run", "--resume", session, "/rewind")  # default: before the last run
    assert code == 0, err
    assert "before run 2" in out and "already was as it was then" in out


def test_rewind_usage(herald: Herald, llm: FakeLLMServer) -> None:  # noqa: F811
    code, _, err = herald("run", "/rewind 2")
    assert code == 2 and "herald run --resume ID" in err
    code, _, err = herald("run", "--resume", "last", "/rewind two")
    assert code == 2 and "at most a run number" in err
