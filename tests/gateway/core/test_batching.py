"""The gateway's opportunistic batcher, with a batch runner that records what it was given."""

from __future__ import annotations

import asyncio

import pytest

from gateway.batching import Batcher, Pending


def run(coro):
    return asyncio.run(coro)


def test_a_lone_request_is_served_at_once_and_concurrent_ones_share_batches():
    seen: list[int] = []

    async def runner(batch: list[Pending]) -> None:
        seen.append(sum(p.rows for p in batch))
        await asyncio.sleep(0.01)  # a feature read + Triton call
        for p in batch:
            p.future.set_result([r["user_id"] for r in p.entity_rows])

    async def main() -> list:
        batcher = Batcher(runner, max_rows=64, max_in_flight=1)
        alone = await batcher.submit([{"user_id": 0}], [{}])
        together = await asyncio.gather(*(batcher.submit([{"user_id": i}], [{}]) for i in range(1, 33)))
        return [alone, *together]

    results = run(main())
    assert results == [[i] for i in range(33)]  # every caller gets its own rows back, in order
    assert seen[0] == 1  # no timer: the lone request did not wait for company
    assert len(seen) < 33 and max(seen) > 1  # the 32 concurrent ones were batched


def test_batches_respect_max_rows():
    sizes: list[int] = []

    async def runner(batch: list[Pending]) -> None:
        sizes.append(sum(p.rows for p in batch))
        for p in batch:
            p.future.set_result(None)

    async def main() -> None:
        batcher = Batcher(runner, max_rows=10, max_in_flight=1)
        await asyncio.gather(*(batcher.submit([{"user_id": i}] * 3, [{}] * 3) for i in range(10)))

    run(main())
    assert sum(sizes) == 30 and max(sizes) <= 10


def test_a_failed_batch_fails_every_caller_in_it_and_the_next_batch_runs():
    calls = {"n": 0}

    async def runner(batch: list[Pending]) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("Triton down")
        for p in batch:
            p.future.set_result("ok")

    async def main() -> tuple:
        batcher = Batcher(runner, max_rows=64, max_in_flight=1)
        first = await asyncio.gather(batcher.submit([{}], [{}]), return_exceptions=True)
        second = await batcher.submit([{}], [{}])
        return first, second

    first, second = run(main())
    assert isinstance(first[0], ConnectionError)
    assert second == "ok"


def test_a_cancelled_caller_is_skipped():
    served: list[int] = []

    async def runner(batch: list[Pending]) -> None:
        served.extend(p.entity_rows[0]["user_id"] for p in batch)
        await asyncio.sleep(0.01)
        for p in batch:
            if not p.future.done():
                p.future.set_result(None)

    async def main() -> None:
        batcher = Batcher(runner, max_rows=64, max_in_flight=1)
        first = asyncio.create_task(batcher.submit([{"user_id": 1}], [{}]))
        await asyncio.sleep(0)
        gone = asyncio.create_task(batcher.submit([{"user_id": 2}], [{}]))
        await asyncio.sleep(0)
        gone.cancel()
        await first
        with pytest.raises(asyncio.CancelledError):
            await gone

    run(main())
    assert served == [1]


@pytest.mark.parametrize("in_flight", [1, 3])
def test_at_most_max_in_flight_batches_run_at_once(in_flight: int):
    running, peak = 0, 0

    async def runner(batch: list[Pending]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        for p in batch:
            p.future.set_result(None)

    async def main() -> None:
        batcher = Batcher(runner, max_rows=1, max_in_flight=in_flight)  # one row per batch
        await asyncio.gather(*(batcher.submit([{"user_id": i}], [{}]) for i in range(12)))

    run(main())
    assert peak == in_flight


@pytest.mark.parametrize("down", [True, False])
def test_a_dependency_down_fails_the_requests_queued_behind_the_batch_at_once(down: bool):
    """A batch stuck on a store that turns out down: who queued behind it gets that 503 with it,
    not after waiting out a deadline of its own; any other failure leaves the queue to run."""
    ran: list[int] = []

    class Down(Exception):
        pass

    async def runner(batch: list[Pending]) -> None:
        ran.append(len(batch))
        if len(ran) == 1:
            await asyncio.sleep(0.05)  # the stuck read
            raise Down() if down else ValueError("this batch's own input")
        for p in batch:
            p.future.set_result("ok")

    async def main() -> list:
        batcher = Batcher(runner, max_rows=64, max_in_flight=1, fails_queue=lambda e: isinstance(e, Down))
        first = asyncio.ensure_future(batcher.submit([{"user_id": 0}], [{}]))
        await asyncio.sleep(0.01)  # the first batch is in flight: these queue behind it
        behind = [batcher.submit([{"user_id": i}], [{}]) for i in range(1, 5)]
        return await asyncio.gather(first, *behind, return_exceptions=True)

    results = run(main())
    if down:
        assert all(isinstance(r, Exception) and type(r).__name__ == "Down" for r in results)
        assert ran == [1]  # the queued requests never ran a batch of their own
    else:
        assert isinstance(results[0], ValueError) and results[1:] == ["ok"] * 4
        assert ran == [1, 4]
