"""The warm-child policy on its own: the next child is made while a run goes on, a dead one is
replaced when taken, and nothing is made for an owner that is closing."""

from __future__ import annotations

import itertools
import threading

from herald.runtime.warm import WarmChildren


class FakeChild:
    def __init__(self, number: int) -> None:
        self.number = number
        self.exit_code: int | None = None
        self.killed = False
        self.ready = False

    def poll(self) -> int | None:
        return self.exit_code

    def wait_ready(self, timeout: float) -> None:
        self.ready = True

    def kill(self, grace: float = 0.0) -> None:
        self.killed = True


def make() -> tuple[WarmChildren[FakeChild], list[FakeChild]]:
    made: list[FakeChild] = []
    numbers = itertools.count(1)

    def spawn() -> FakeChild:
        made.append(FakeChild(next(numbers)))
        return made[-1]

    return WarmChildren(spawn, enabled=True), made


def test_taking_a_child_starts_the_next() -> None:
    children, made = make()
    children.replenish()
    first = children.take(5)
    assert first.number == 1 and first.ready
    children.wait_ready(5)
    assert [c.number for c in made] == [1, 2]  # the second was made while the first ran
    assert children.take(5).number == 2


def test_a_child_that_died_while_waiting_is_replaced() -> None:
    children, made = make()
    children.replenish()
    children.wait_ready(5)
    made[0].exit_code = 1
    taken = children.take(5)
    assert made[0].killed and taken.number == 2


def test_nothing_is_made_once_closing() -> None:
    children, made = make()
    children.replenish()
    children.take(5)
    children.wait_ready(5)  # the next one is made and waits
    children.close()
    assert made[-1].killed  # the waiting one is gone
    count = len(made)
    children.replenish()
    children.wait_ready(5)
    assert len(made) == count


def test_disabled_means_one_child_per_run_made_on_demand() -> None:
    made: list[FakeChild] = []

    def spawn() -> FakeChild:
        made.append(FakeChild(len(made) + 1))
        return made[-1]

    children = WarmChildren(spawn, enabled=False)
    children.replenish()
    assert made == []
    assert children.take(5).number == 1
    children.wait_ready(5)
    assert len(made) == 1


def test_a_caller_can_hand_over_the_run_before_the_next_is_made() -> None:
    children, made = make()
    waiting = FakeChild(0)
    children.put(waiting)
    assert children.take(5, replenish=False) is waiting and waiting.ready
    assert made == [], "nothing is made before the caller asks"
    children.replenish()
    children.wait_ready(5)
    children.replenish()  # one waits already: no second one
    children.wait_ready(5)
    assert [c.number for c in made] == [1]
    assert children.take(5, replenish=False) is made[0]


def test_a_dead_child_taken_without_replenish_still_starts_the_next() -> None:
    children, made = make()
    dead = FakeChild(0)
    dead.exit_code = 1
    children.put(dead)
    assert children.take(5, replenish=False) is made[0] and dead.killed
    children.wait_ready(5)
    assert [c.number for c in made] == [1, 2], "a child spawned on the spot has its successor made meanwhile"


def test_close_while_the_next_is_being_made_kills_it_and_ends_the_helper() -> None:
    started, release = threading.Event(), threading.Event()
    made: list[FakeChild] = []

    def spawn() -> FakeChild:
        started.set()
        assert release.wait(30)
        made.append(FakeChild(len(made) + 1))
        return made[-1]

    children = WarmChildren(spawn, enabled=True)
    before = set(threading.enumerate())
    children.replenish()
    assert started.wait(30)
    helpers = set(threading.enumerate()) - before
    closer = threading.Thread(target=children.close)
    closer.start()
    release.set()
    closer.join(30)
    assert not closer.is_alive()
    assert len(made) == 1 and made[0].killed  # made after close began: not left waiting
    assert helpers and not any(t.is_alive() for t in helpers)  # the helper thread ended with it
