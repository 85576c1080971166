"""In-doubt verification runs apart from the tail, bounded, with a deadline per lookup."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_reconciler.core import Reconciler, run_rounds
from pacer_reconciler.domain.verification import verdict
from pacer_reconciler.ports import InDoubt, Position
from pacer_reconciler.verifier import Verifier
from tests.unit.dispatching import until

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DEADLINE = timedelta(seconds=300)


class Lookup:
    """Answers per idem_key: True/False/None, "hang" (never answers) or "raise"."""

    def __init__(self, answers: dict[str, object]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.never = asyncio.Event()

    async def lookup(self, guid: str, idem_key: str, tenant: str = "default") -> bool | None:
        self.asked.append(idem_key)
        answer = self.answers[idem_key]
        if answer == "hang":
            await self.never.wait()
        if answer == "raise":
            raise RuntimeError("gateway client bug")
        return answer  # type: ignore[return-value]  # the fake answers True/False/None; 'hang'/'raise' never return


class Sweeps:
    """In-doubt items and the domain's verdict, in memory."""

    def __init__(self, items: list[InDoubt]) -> None:
        self.items = {i.item_id: i for i in items}
        self.resolved: dict[str, tuple[bool | None, str | None]] = {}

    async def sweep(self, kind: str, limit: int) -> int:
        return 0

    async def in_doubt(self, limit: int) -> list[InDoubt]:
        return list(self.items.values())[:limit]

    async def resolve(self, item: InDoubt, found: bool | None, now: datetime) -> str | None:
        v = verdict(found, item.since, now, DEADLINE)
        self.resolved[item.item_id] = (found, v.to.value if v else None)
        if v is not None:
            del self.items[item.item_id]
        return v.to.value if v else None


class EmptyLog:
    """An event log with nothing new: each tail round reads and returns at once."""

    def __init__(self) -> None:
        self.reads = 0

    async def position(self) -> Position:
        return Position("0", 0)

    async def read(self, after: Position, limit: int) -> list[object]:
        self.reads += 1
        return []

    async def quiet_position(self, after: Position) -> Position | None:
        return None


def _items(n: int, since: datetime = NOW) -> list[InDoubt]:
    return [InDoubt(f"i{k}", f"g{k}", f"k{k}", since) for k in range(n)]


def test_tail_rounds_keep_completing_while_every_lookup_hangs() -> None:
    async def scenario() -> None:
        sweeps = Sweeps(_items(40))
        lookup = Lookup({f"k{k}": "hang" for k in range(40)})
        verifier = Verifier(sweeps, lookup, concurrency=4, timeout_s=0.05, clock=lambda: NOW)
        log = EmptyLog()
        rec = Reconciler(log, sweeps, publisher=None)  # type: ignore[arg-type]  # this test drives only the verifier: no publisher is used
        stop = asyncio.Event()
        task = asyncio.create_task(verifier.run(stop, lambda: True, interval_s=0.01))
        rounds_while_hung = 0
        max_in_flight = 0

        async def tail_round() -> int:
            nonlocal rounds_while_hung, max_in_flight
            n = await asyncio.wait_for(rec.tail_once(), timeout=1.0)
            if verifier.in_flight:
                rounds_while_hung += 1
            max_in_flight = max(max_in_flight, verifier.in_flight)
            return n

        # Tail rounds as the service runs them (run_rounds, a millisecond apart), until stopped.
        errors: list[str] = []
        tailing = asyncio.create_task(run_rounds(tail_round, stop, 0.001, 1.0, lambda e, k: errors.extend([e] * k)))
        await until(lambda: verifier.lookups["timeout"] >= 12 or tailing.done(), 10)
        stop.set()
        await tailing
        await task
        assert errors == [], "no tail round failed"
        assert rounds_while_hung > 10
        assert max_in_flight == 4, "at most `concurrency` lookups at once, and all of them used"
        assert verifier.in_flight == 0, "stopping cancels the hung lookups"

    asyncio.run(scenario())


def test_a_round_starts_lookups_without_waiting_for_them() -> None:
    async def scenario() -> None:
        sweeps = Sweeps(_items(10))
        lookup = Lookup({f"k{k}": "hang" for k in range(10)})
        verifier = Verifier(sweeps, lookup, concurrency=3, timeout_s=60, clock=lambda: NOW)
        assert await asyncio.wait_for(verifier.start_round(), timeout=1.0) == 3
        assert await asyncio.wait_for(verifier.start_round(), timeout=1.0) == 0, "no free slot, nothing asked twice"
        await until(lambda: len(lookup.asked) == 3)
        assert sorted(lookup.asked) == ["k0", "k1", "k2"]
        await verifier.close()

    asyncio.run(scenario())


ANSWERS = st.sampled_from([True, False, None, "hang", "raise"])


@settings(max_examples=40, deadline=None)
@given(answers=st.lists(ANSWERS, min_size=1, max_size=12), past_deadline=st.booleans())
def test_only_a_real_answer_decides_and_a_timeout_never_requeues(answers: list[object], past_deadline: bool) -> None:
    since = NOW - DEADLINE - timedelta(seconds=1) if past_deadline else NOW
    items = _items(len(answers), since)

    async def scenario() -> Sweeps:
        sweeps = Sweeps(items)
        verifier = Verifier(sweeps, Lookup({f"k{k}": a for k, a in enumerate(answers)}),
                            concurrency=16, timeout_s=0.02, clock=lambda: NOW)
        await verifier.start_round()
        await until(lambda: len(sweeps.resolved) == len(items))
        assert verifier.lookups["timeout"] == answers.count("hang")
        assert verifier.lookups["error"] == answers.count("raise")
        return sweeps

    sweeps = asyncio.run(scenario())
    for k, answer in enumerate(answers):
        found, to = sweeps.resolved[f"i{k}"]
        if answer in (True, False):
            assert found is answer
            assert to == ("confirmed" if answer else "pending")
        else:  # no answer, a timeout or an error: never proof of non-delivery
            assert found is None
            assert to == ("unverified" if past_deadline else None)
