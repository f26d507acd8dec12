"""The one stop sequence (deadline -> terminate -> grace -> kill) every collect loop runs on."""

from __future__ import annotations

from herald._sandbox.procs.trees import KillClock


def _clock(deadline: float | None, grace: float) -> tuple[KillClock, list[str]]:
    steps: list[str] = []
    return KillClock(deadline, grace, lambda: steps.append("terminate"), lambda: steps.append("kill")), steps


def test_the_deadline_terminates_and_the_grace_later_kills() -> None:
    clock, steps = _clock(deadline=10.0, grace=2.0)
    assert not clock.tick(9.9) and steps == [] and clock.wait(9.0) == 1.0
    assert not clock.tick(10.0) and steps == ["terminate"] and clock.reason == "timeout"
    assert clock.wait(11.0) == 1.0  # the loop sleeps until the kill step, no longer
    assert clock.tick(12.0) and steps == ["terminate", "kill"]
    assert clock.tick(20.0) and steps == ["terminate", "kill"]  # each step runs once
    assert clock.wait(20.0) is None


def test_stop_starts_at_once_and_keeps_its_reason() -> None:
    clock, steps = _clock(deadline=100.0, grace=0.5)
    clock.stop("interrupted", now=1.0)
    clock.stop("interrupted", now=1.2)  # a second interrupt does not restart the grace
    assert steps == ["terminate"] and clock.reason == "interrupted"
    assert not clock.tick(1.4) and clock.tick(1.5) and steps == ["terminate", "kill"]
    assert clock.reason == "interrupted"  # the deadline passing later changes nothing


def test_no_deadline_waits_for_nothing() -> None:
    clock, steps = _clock(deadline=None, grace=1.0)
    assert not clock.tick(1e9) and clock.wait(1e9) is None and steps == []
