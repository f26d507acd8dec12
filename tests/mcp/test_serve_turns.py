"""FairTurns, the one Runtime handed to waiting clients in turn: order and cancellation, driven
step by step on one event loop (no timing)."""

from __future__ import annotations

import asyncio

from herald.cli.mcplimits import FairTurns


async def _take(turns: FairTurns, who: str, order: list[str], release: asyncio.Event) -> None:
    async with turns.turn(who):
        order.append(who)
        await release.wait()


async def _settle() -> None:
    for _ in range(5):  # let every ready task run up to its next wait
        await asyncio.sleep(0)


def test_waiting_clients_take_turns_before_the_one_that_just_ran() -> None:
    async def main() -> list[str]:
        turns, order = FairTurns(), list[str]()
        releases = {name: asyncio.Event() for name in ("a1", "a2", "a3", "b1", "c1")}
        tasks = []
        for name in ("a1", "a2", "a3", "b1", "c1"):  # a floods first, then b and c ask once
            tasks.append(asyncio.create_task(_take(turns, name[0], order, releases[name])))
            await _settle()
        for name in ("a1", "b1", "c1", "a2", "a3"):
            releases[name].set()
            await _settle()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == ["a", "b", "c", "a", "a"]


def test_a_cancelled_waiter_gives_up_its_place_and_a_cancelled_holder_passes_the_turn() -> None:
    async def main() -> list[str]:
        turns, order = FairTurns(), list[str]()
        hold, never, last = asyncio.Event(), asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(_take(turns, "a", order, hold))
        await _settle()
        waiter = asyncio.create_task(_take(turns, "b", order, never))
        await _settle()
        waiter.cancel()  # b gives up while waiting
        await _settle()
        after = asyncio.create_task(_take(turns, "c", order, last))
        await _settle()
        holder.cancel()  # a is cancelled while it holds the turn: c gets it
        await _settle()
        last.set()
        await asyncio.wait_for(after, 60)
        async with turns.turn("d"):  # and the turn is free again
            order.append("d")
        return order

    assert asyncio.run(main()) == ["a", "c", "d"]
