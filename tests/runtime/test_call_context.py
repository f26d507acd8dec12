"""What a tool call runs under (cancellable, foreground_only, charged_to): set for the block,
restored after it, even when it raises, and nested blocks restore their outer value."""

from __future__ import annotations

import threading

import pytest

from herald.backends.shell import cancellable, current_cancel, foreground_only
from herald.spill import SpillBudget, charged_to, current_budget


def test_cancel_event_is_set_for_the_block_and_restored() -> None:
    outer, inner = threading.Event(), threading.Event()
    assert current_cancel() is None
    with cancellable(outer):
        assert current_cancel() is outer
        with cancellable(inner):
            assert current_cancel() is inner
        with cancellable(None):  # None leaves the outer event in force
            assert current_cancel() is outer
        assert current_cancel() is outer
    assert current_cancel() is None


def test_a_raising_block_restores_what_it_set() -> None:
    budget = SpillBudget(100)
    with pytest.raises(RuntimeError), charged_to(budget), cancellable(threading.Event()):
        assert current_budget() is budget
        raise RuntimeError("the tool failed")
    assert current_budget() is None
    assert current_cancel() is None


def test_foreground_only_is_per_thread() -> None:
    from herald.backends import shell

    seen: list[bool] = []
    with foreground_only(True):
        worker = threading.Thread(target=lambda: seen.append(shell._foreground_only.get()))
        worker.start()
        worker.join()
        assert shell._foreground_only.get() is True
    assert seen == [False]
    assert shell._foreground_only.get() is False
