"""search_files from a script in backend mode runs inside the backend's supervisor (the sandbox
package's search core, next to the script), on every backend and with both engines: the answers
are those of Herald's own search_files over the Backend protocol, byte for byte, errors included,
and every call is recorded in Herald's transcript as answered in the backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends import Backend
from herald.tools import ToolError
from herald.tools.stubgen import RUNTIME_PACKAGE
from tests.runtime._backend_mode import (
    gone_on_backend,
    in_backend_settings,
    script_call_records,
    script_caller,
)
from tests.tools.conftest import caller

TREE = {
    "README.md": "# Demo\nTODO: write docs\n",
    "src/app.py": "import os\n\ndef main():\n    # TODO: handle errors\n    return os.getcwd()\n",
    "src/util.py": "def helper():\n    return 42  # TODO\n",
    "src/ünï ☃.py": "# TODO: unicode names too\n",
    "src/gen/out.py": "# TODO: generated, ignored\n",
    "src/keep.log": "TODO: kept by a ! line\n",
    "debug.log": "TODO: ignored\n",
    ".gitignore": "*.log\ngen/\n",
    "src/.gitignore": "!keep.log\n",
    "crlf.txt": "one TODO\r\ntwo\r\n",
    "long.txt": "TODO " + "x" * 3000 + "\n",
    "node_modules/dep/index.js": "// TODO: skipped\n",
    ".hidden/secret.py": "TODO\n",
    "logo.png": "\x89PNG\r\n\x1a\n\x00\x00TODO",
}

CALLS: list[dict[str, Any]] = [
    {"pattern": "TODO"},
    {"pattern": "TODO", "limit": 2, "offset": 1},
    {"pattern": "TODO", "limit": 2, "offset": 6},
    {"pattern": "t.do", "file_glob": "*.py"},
    {"pattern": "TODO", "file_glob": "src/**"},
    {"pattern": "TODO", "file_glob": "!*.{py,md}"},
    {"pattern": "TODO", "path": "src"},
    {"pattern": "TODO", "path": "src/gen"},
    {"pattern": "TODO", "path": "debug.log"},
    {"pattern": "*.py", "target": "files"},
    {"pattern": "util", "target": "files"},
    {"pattern": "*", "target": "files", "file_glob": "src/*", "limit": 2},
    {"pattern": "*", "target": "files", "path": "{root}/src", "file_glob": "*.py"},
    {"pattern": "(unclosed"},
    {"pattern": ""},
    {"pattern": "x", "path": "nowhere"},
    {"pattern": "x", "file_glob": "*.{py"},
    {"pattern": "x", "file_glob": "src/"},
    {"pattern": "x", "colour": "red"},
    {"pattern": "x", "limit": 0},
]


def _answers(call: Any, root: str) -> list[Any]:
    answers = []
    for args in CALLS:
        filled = {k: v.replace("{root}", root) if isinstance(v, str) else v for k, v in args.items()}
        try:
            answers.append({"result": call("search_files", **filled)})
        except ToolError as exc:
            answers.append({"error": [exc.error_type, str(exc)]})
    return answers


@pytest.mark.parametrize("engine", ["auto", "python"])
def test_search_in_the_supervisor_answers_as_herald_does(
    any_backend: Backend, settings: Settings, tmp_path: Path, engine: str
) -> None:
    backend = any_backend
    if engine == "auto" and backend.run("command -v rg").exit_code != 0:
        pytest.skip(f"ripgrep is not installed on the {backend.name} backend")
    for name, content in TREE.items():
        backend.write_bytes(
            name, content.encode("utf-8", "surrogateescape") if name != "logo.png" else content.encode("latin-1")
        )
    tuned = settings.with_overrides({"files.search": engine})
    direct = _answers(caller(backend, tuned), backend.cwd)
    transcript = tmp_path / "t.jsonl"
    runtime = Runtime(
        backend, settings=in_backend_settings(tuned), exec_mode="backend", transcript=transcript, policy="full"
    )
    try:
        in_backend = _answers(script_caller(runtime), backend.cwd)
        assert runtime.transcript is not None
        runtime.transcript.flush()
    finally:
        runtime.close()
    for args, got, want in zip(CALLS, in_backend, direct, strict=True):
        assert json.dumps(got, ensure_ascii=False) == json.dumps(want, ensure_ascii=False), args
    engines = {answer["result"]["engine"] for answer in direct if "result" in answer}
    assert engines == {"ripgrep" if engine == "auto" else "python"}
    records = [r for r in script_call_records(transcript) if r["tool"] == "search_files"]
    assert len(records) == len(CALLS)
    assert all(r.get("in_backend") for r in records), [r for r in records if not r.get("in_backend")]


POLICY_SCRIPT = """
from hermes_tools import parallel, search_files, ToolError
def attempt(label, pattern, **args):
    try:
        result = search_files(pattern, **args)
        print(label, result.get("files", result.get("matches")))
    except ToolError as exc:
        print(label, exc.error_type)
attempt("inside", "*.md", target="files")
attempt("absolute", "*", path="/etc", target="files")
attempt("dotdot", "*", path="src/../../../etc", target="files")
def one(i):
    try:
        search_files("*.md", target="files")
        return "ok"
    except ToolError as exc:
        return exc.error_type
print(sorted(parallel([(one, i) for i in range(6)])))
"""


@pytest.mark.parametrize("profile", ["workspace-write", "read-only"])
def test_search_in_the_supervisor_keeps_the_policy_and_the_call_budget(
    any_backend: Backend, settings: Settings, tmp_path: Path, profile: str
) -> None:
    # Confined to the workspace (the session's directory here) under both profiles; a path
    # outside it, as written, goes to Herald, whose Gate refuses it in its words. search_files
    # only reads, so the read-only profile leaves it to the supervisor too.
    backend = any_backend
    backend.write_bytes("README.md", b"TODO\n")
    transcript = tmp_path / "t.jsonl"
    runtime = Runtime(
        backend, settings=in_backend_settings(settings), exec_mode="backend", transcript=transcript, policy=profile
    )
    try:
        result = runtime.execute(POLICY_SCRIPT, max_tool_calls=6, timeout=120)
        assert runtime.transcript is not None
        runtime.transcript.flush()
    finally:
        runtime.close()
    assert result.status == "success", result
    assert result.output.split("\n")[:-1] == [
        "inside ['README.md']",
        "absolute PolicyRefused",
        "dotdot PolicyRefused",
        "['ToolCallLimit', 'ToolCallLimit', 'ToolCallLimit', 'ok', 'ok', 'ok']",
    ]
    assert result.tool_calls_made == 6
    records = script_call_records(transcript)
    assert {r["tool"] for r in records} == {"search_files"}
    # The call allowed ran in the backend, Herald's Gate refused the others; of the parallel
    # ones, those within the budget ran in the backend, Herald refused the rest.
    assert [r.get("in_backend", False) for r in records[:3]] == [True, False, False]
    assert sorted(r.get("in_backend", False) for r in records[3:]) == [False] * 3 + [True] * 3


BOMB = "(a+)+$"  # exponential time on "aaa...!" in Python's re


def test_a_regex_bomb_in_the_supervisor_ends_with_the_run(any_backend: Backend, settings: Settings) -> None:
    # The supervisor's regex worker is bound by the run's time: the run ends as a timeout, the
    # worker does not outlive it, and the next run's search works.
    backend = any_backend
    backend.write_bytes("bomb.txt", b"a" * 60 + b"!\n")
    tuned = in_backend_settings(settings.with_overrides({"files.search": "python"}))
    with Runtime(backend, settings=tuned, exec_mode="backend", transcript=False, policy="full") as runtime:
        result = runtime.execute(f"from hermes_tools import search_files\nsearch_files({BOMB!r})\n", timeout=3)
        assert result.status == "timeout", result
        assert gone_on_backend(backend, f"{RUNTIME_PACKAGE}/search/regex_worker.py"), "the regex worker lives on"
        again = runtime.execute(
            "from hermes_tools import search_files\nprint(search_files('a!')['matches'])\n", timeout=60
        )
        assert again.output == "[{'path': 'bomb.txt', 'line': 1, 'text': '" + "a" * 60 + "!'}]\n", again
