"""Evidence written off the response path: observers hand it over, one task sends it.

Observers run on the event loop after the callers were answered (gateway/observe.py) and must
not wait, so they only append here. One task sends whatever accumulated meanwhile in one round
trip (one Lua call on Redis, one transaction on SQLite), then waits ``linger_s`` (20 ms) and looks
again: under load each round trip carries many requests' rows, at one request a second each goes
alone within milliseconds. Count sources (the shadow runner's one-minute slots) are drained
every ``count_every_s``.

Nothing here can fail a request. A store that does not answer costs the evidence of that round
trip, counted in ``gateway_evidence_lost_total{model,what}`` and logged at most every 10 s;
the predictions themselves were served. Past ``max_pending`` rows waiting (the store slower
than the traffic), new evidence is dropped and counted the same way, so memory stays bounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Final

from gateway import metrics
from gateway.errors import GatewayError
from gateway.evidence.store import EvidenceStore, Remembered, SlotCounts

log = logging.getLogger("gateway.evidence")

MAX_PENDING: Final = 100_000
# After a round trip the writer waits this long before the next, so one carries every row that
# came meanwhile (measured: one call per served batch cost the gateway +40 us a request at 16
# clients; evidence a few milliseconds later costs nothing). 20 ms, not 5: each round trip on the
# SQLite store (a thread hand-off and a transaction) cost ~150 µs of the gateway's CPU, a fifth
# of a one-client request's at 5 ms (issue 33, make bench (c)); the answers are needed when
# labels come, seconds to weeks later.
LINGER_S: Final = 0.02
LOG_EVERY_S: Final = 10.0

CountSource = Callable[[], Sequence[SlotCounts]]


class EvidenceWriter:
    def __init__(
        self,
        store: EvidenceStore,
        max_pending: int = MAX_PENDING,
        count_every_s: float = 1.0,
        linger_s: float = LINGER_S,
    ) -> None:
        self.store = store
        self.max_pending = max_pending
        self.count_every_s = count_every_s
        self.linger_s = linger_s
        self._drain_due = False
        self._remembered: list[Remembered] = []
        self._rows = 0
        self._registers: dict[tuple[str, str], str] = {}
        self._puts: dict[str, str] = {}
        self._sources: list[tuple[str, CountSource]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._logged = 0.0

    # -- handed over on the event loop (never waits) ----------------------------------------

    def remember(self, item: Remembered) -> None:
        if self._rows + len(item.ids) > self.max_pending:
            self._lost(
                item.model, "prediction" if item.champion else "challenger", len(item.ids), "queue full"
            )
            return
        self._remembered.append(item)
        self._rows += len(item.ids)
        self._wake.set()

    def register(self, model: str, pair: str, info: str) -> None:
        self._registers[(model, pair)] = info
        self._wake.set()

    def put(self, name: str, value: str) -> None:
        self._puts[name] = value
        self._wake.set()

    def counts_from(self, model: str, source: CountSource) -> None:
        """Drain ``source`` every ``count_every_s`` (``model``: whose counts they are, for the
        lost-evidence metric)."""
        self._sources.append((model, source))

    # -- the task -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
            self._tick()

    def _tick(self) -> None:
        """Every ``count_every_s``: the count sources are due (a timer, not a timeout on every
        wait, which cost a task per wake-up)."""
        if self._closing:
            return
        self._drain_due = True
        self._wake.set()
        asyncio.get_running_loop().call_later(self.count_every_s, self._tick)

    async def _run(self) -> None:
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            drain, self._drain_due = self._drain_due, False
            await self.flush(drain_counts=drain)
            await asyncio.sleep(self.linger_s)

    async def flush(self, drain_counts: bool = True) -> None:
        """Send everything waiting now (and the count sources' slots with ``drain_counts``)."""
        registers, self._registers = self._registers, {}
        remembered, self._remembered, self._rows = _merged(self._remembered), [], 0
        puts, self._puts = self._puts, {}
        try:
            for (model, pair), info in registers.items():
                await self.store.register(model, pair, info)
            await self.store.remember(remembered)
            for name, value in puts.items():
                await self.store.put(name, value)
        except GatewayError as exc:
            for item in remembered:
                what = "prediction" if item.champion else "challenger"
                self._lost(item.model, what, len(item.ids), exc.message)
            self._registers = {**registers, **self._registers}  # tiny: tried again next time
            self._puts = {**puts, **self._puts}
        if drain_counts:
            for model, source in self._sources:
                updates = source()
                try:
                    await self.store.add_counts(updates)
                except GatewayError as exc:
                    self._lost(model, "shadow", len(updates), exc.message)

    def _lost(self, model: str, what: str, count: int, why: str) -> None:
        if not count:
            return
        metrics.EVIDENCE_LOST.labels(model, what).inc(count)
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY_S:
            self._logged = now
            log.warning(
                "evidence not kept (%d %s rows of %s; counted in gateway_evidence_lost_total): %s",
                count,
                what,
                model,
                why,
            )

    async def close(self, wait_s: float = 2.0) -> None:
        """Send what is waiting (within ``wait_s``), then stop the task."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=wait_s)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
        try:
            await asyncio.wait_for(self.flush(), timeout=wait_s)
        except TimeoutError:
            log.warning("evidence still waiting at shutdown was not written within %.1f s", wait_s)


def _merged(items: list[Remembered]) -> list[Remembered]:
    """The batches waiting, one per (model, answering version, champion or not), in the order
    each first came: a store then checks and writes each group in one statement, not one per
    served batch (the SQLite store's per-statement cost was most of a flush)."""
    if len(items) < 2:
        return items
    groups: dict[tuple[str, str, bool], list[Remembered]] = {}
    for item in items:
        groups.setdefault((item.model, item.pair, item.champion), []).append(item)
    if len(groups) == len(items):
        return items
    return [
        group[0]
        if len(group) == 1
        else Remembered(
            model,
            pair,
            champion,
            [i for g in group for i in g.ids],
            [a for g in group for a in g.answers],
        )
        for (model, pair, champion), group in groups.items()
    ]
