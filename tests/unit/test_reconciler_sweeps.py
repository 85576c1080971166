"""One failing sweep is reported and the others still run."""

from __future__ import annotations

import asyncio
from datetime import datetime

from pacer_reconciler.core import SWEEP_KINDS, Reconciler, RoundGuard, run_rounds
from pacer_reconciler.ports import InDoubt, SweepKind


class Sweeps:
    def __init__(self, broken: SweepKind) -> None:
        self.broken = broken
        self.ran: list[str] = []

    async def sweep(self, kind: SweepKind, limit: int) -> int:
        self.ran.append(kind)
        if kind == self.broken:
            raise ValueError("invalid input syntax for type bigint")
        return 2

    async def in_doubt(self, limit: int) -> list[InDoubt]:
        return []

    async def resolve(self, item: InDoubt, found: bool | None, now: datetime) -> str | None:
        return None


def test_a_failing_sweep_is_reported_and_the_others_still_run() -> None:
    sweeps = Sweeps(broken="claim_expired")
    rec = Reconciler(events=None, sweeps=sweeps, publisher=None)  # type: ignore[arg-type]  # this test sweeps only: no event log or publisher is used
    report = asyncio.run(rec.sweep_once())
    assert sweeps.ran == list(SWEEP_KINDS)
    assert report.failed == ["claim_expired"]
    assert report.moved == {k: (0 if k == "claim_expired" else 2) for k in SWEEP_KINDS}


def test_a_failing_round_is_counted_and_backed_off_never_raised() -> None:
    guard = RoundGuard(base_s=0.5, max_s=3.0)
    outcomes: list[object] = [KeyError("bug"), ConnectionError("db down"), ConnectionError("db down"),
                              ConnectionError("db down"), ConnectionError("db down"), 7, KeyError("bug")]

    async def round_() -> int:
        out = outcomes.pop(0)
        if isinstance(out, Exception):
            raise out
        return out  # type: ignore[return-value]  # exceptions in the script are raised above, the rest are ints

    async def run_all() -> list[tuple[int, float]]:
        return [await guard.run(round_) for _ in range(7)]

    results = asyncio.run(run_all())
    assert results == [(0, 0.5), (0, 1.0), (0, 2.0), (0, 3.0), (0, 3.0), (7, 0.0), (0, 0.5)]
    assert guard.errors == {"KeyError": 2, "ConnectionError": 4}


def test_rounds_run_back_to_back_until_stopped_and_count_their_failures_by_type() -> None:
    # every_s = 0: back to back, except after a failure (the guard's back-off, here 0.01 s).
    stop = asyncio.Event()
    script: list[object] = [ConnectionError("db down"), 3, KeyError("bug"), 4, 5]
    ran: list[object] = []
    counted: list[tuple[str, int]] = []

    async def round_() -> int:
        out = script.pop(0)
        ran.append(out)
        if not script:
            stop.set()
        if isinstance(out, Exception):
            raise out
        return out  # type: ignore[return-value]  # exceptions in the script are raised above, the rest are ints

    async def go() -> None:
        await asyncio.wait_for(run_rounds(round_, stop, 0.0, 0.01, lambda e, n: counted.append((e, n))), 10)

    asyncio.run(go())
    assert len(ran) == 5 and not script  # every round ran, then the loop saw stop and ended
    assert counted == [("ConnectionError", 1), ("KeyError", 1)]
