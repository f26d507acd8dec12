"""The grant (herald/policy/grant.py): what the policy lets be answered next to a script, decided
in one place. Whatever it leaves out goes to Herald's Dispatcher, which decides it there: a tool a
rule names, a changing tool under read-only, every call of a run with a byte or time budget;
host mode answers only reads, within what the script's process sees as Herald does."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from herald import Settings
from herald.backends.local import LocalBackend
from herald.policy import Policy
from herald.policy.grant import RunLimits, ToolGrants
from herald.runtime.dispatcher import Dispatcher
from herald.runtime.toolset import default_registry
from herald.tools import ToolContext

Make = Callable[..., ToolGrants]
FILE_TOOLS = ["patch", "read_file", "search_files", "terminal", "write_file"]


@pytest.fixture
def make(local_backend: LocalBackend, settings: Settings) -> Iterator[Make]:
    made: list[ToolContext] = []

    def make(visible: list[str] | None = None, masked: tuple[str, ...] = (), **overrides: object) -> ToolGrants:
        session = settings.with_overrides(dict(overrides))
        ctx = ToolContext(backend=local_backend, settings=session)
        made.append(ctx)
        dispatcher = Dispatcher(default_registry(), ctx, policy=Policy.from_settings(session))
        return ToolGrants(dispatcher.script_tools, dispatcher.gate, ctx, visible, masked)

    yield make
    for ctx in made:
        ctx.close()


def test_the_policy_keeps_what_it_decides_with_herald(make: Make, local_backend: LocalBackend) -> None:
    assert sorted(make().specs) == FILE_TOOLS
    assert sorted(make(**{"policy.profile": "read-only"}).specs) == ["read_file", "search_files"]
    ruled = make(**{"policy.rules": ["deny terminal command=git push", "ask write_file path=*.env"]})
    assert sorted(ruled.specs) == ["patch", "read_file", "search_files"]
    everything = make()
    assert everything.grant(RunLimits(5, None, ["reply_bytes"])) is None  # Herald keeps byte budgets
    assert everything.grant(RunLimits(5, None, ["web_calls"])) is not None  # not this one


def test_a_grant_says_what_is_left_of_the_run(make: Make, local_backend: LocalBackend) -> None:
    local_backend.run("true")  # the session shell runs: terminal can share it
    grant = make().grant(RunLimits(3, time.monotonic() + 10.0))
    assert grant is not None and sorted(grant["local"]) == FILE_TOOLS
    assert grant["max_calls"] == 3 and grant["cwd"] == local_backend.cwd
    assert "roots" in grant  # the local backend's masks, whatever the profile
    assert 0 < (grant["shell"]["time_left"] or 0) <= 10.0 and 0 < (grant["search"]["time_left"] or 0) <= 10.0


def test_host_mode_answers_reads_within_what_the_script_sees(make: Make, workspace: Path, settings: Settings) -> None:
    sub, hidden = workspace.resolve() / "sub", workspace.resolve() / "secrets"
    spill = settings.spill_dir.resolve()
    plain = make(**{"policy.profile": "workspace-write"}).grant(RunLimits(5, None))
    assert plain is not None and f"{spill}/" in plain["roots"].get("unmasked_read", [])  # Herald reads its spill files
    # The script's process sees only `sub` as Herald does, and its own (not Herald's) spill directory.
    grant = make(visible=[str(sub)], masked=(str(hidden), str(spill)),
                 **{"policy.profile": "workspace-write"}).grant(RunLimits(5, None))
    assert grant is not None and grant["local"] == ["read_file"]
    roots = grant["roots"]
    assert roots["read"] == [f"{sub}/"] and roots["write"] == [f"{sub}/"]  # the deeper of each nesting pair
    assert {f"{hidden}/", f"{spill}/"} <= set(roots.get("masked", []))
    assert not roots.get("unmasked_read") and not roots.get("unmasked")
