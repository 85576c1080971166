"""An event or command the reconciler cannot handle is skipped with a reason; the tail goes on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.events import ItemEvent
from pacer_common.domain.status import ItemStatus as S
from pacer_reconciler.core import Reconciler
from pacer_reconciler.ports import Position, Rejected, Unreadable
from tests.unit.reconciler_fakes import Log, Publisher


def _event(k: int) -> ItemEvent:
    return ItemEvent(seq=k, type="ItemRequeued", item_id=f"i{k}", job_id="j", shard_id=1, guid="g", version=2,
                     from_status=S.WAITING_RETRY, to_status=S.PENDING, occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
                     payload={})


@settings(max_examples=60, deadline=None)
@given(kinds=st.lists(st.sampled_from(["ok", "unreadable", "bad_command", "too_large"]), min_size=1, max_size=30),
       batch=st.integers(1, 7))
def test_bad_rows_are_skipped_and_counted_and_every_good_one_goes_through(kinds: list[str], batch: int) -> None:
    rows: list[tuple[Position, ItemEvent | Unreadable]] = [
        (Position("1", k + 1), Unreadable(k + 1, f"i{k + 1}", "unknown event type") if kind == "unreadable"
         else _event(k + 1)) for k, kind in enumerate(kinds)]
    ids = {kind: {f"i{k + 1}" for k, x in enumerate(kinds) if x == kind} for kind in set(kinds)}
    log = Log(rows, ids.get("bad_command", set()))
    pub = Publisher(ids.get("too_large", set()))
    rec = Reconciler(log, None, pub, batch=batch)  # type: ignore[arg-type]  # this test reads events only: no sweep store is used

    async def tail_all() -> None:
        while await rec.tail_once():
            pass

    asyncio.run(tail_all())
    assert log.cursor == rows[-1][0], "the cursor passes every row, bad ones included"
    assert sorted(e.item_id for e in log.applied) == sorted(f"i{k + 1}" for k, x in enumerate(kinds) if x != "unreadable")
    assert sorted(pub.commands) == sorted(ids.get("ok", set()))
    assert rec.bad == {reason: len(ids[kind]) for kind, reason in (
        ("unreadable", "unreadable_event"), ("bad_command", "bad_command"), ("too_large", "unpublishable"))
        if ids.get(kind)}


class PoisonLog(Log):
    """Applying a batch that holds a poison event fails (as a foreign-key violation would);
    ``down`` makes every commit fail as an outage would."""

    def __init__(self, rows: list[tuple[Position, ItemEvent | Unreadable]], poison: set[str]) -> None:
        super().__init__(rows, set())
        self.poison = poison
        self.down = False

    async def commit_batch(self, events: Sequence[ItemEvent], start: Position, to: Position) -> None:
        if self.down:
            raise ConnectionError("database unreachable")
        if any(e.item_id in self.poison for e in events):
            raise RuntimeError("insert or update violates foreign key constraint")
        await super().commit_batch(events, start, to)


class NoPublisher:
    async def publish(self, events: Sequence[ItemEvent], commands: Sequence[ItemCommand]) -> list[Rejected]:
        return []


async def _rounds(rec: Reconciler, n: int) -> None:
    for _ in range(n):  # as RoundGuard runs them: an exception ends the round, the next comes
        with contextlib.suppress(RuntimeError, ConnectionError):
            await rec.tail_once()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), data=st.data(), batch=st.integers(1, 16))
def test_a_row_that_fails_its_batch_is_isolated_and_skipped_and_every_other_is_applied_once(
        n: int, data: st.DataObject, batch: int) -> None:
    rows: list[tuple[Position, ItemEvent | Unreadable]] = [(Position("1", k), _event(k)) for k in range(1, n + 1)]
    poison = data.draw(st.sets(st.sampled_from([f"i{k}" for k in range(1, n + 1)]), max_size=3))
    log = PoisonLog(rows, poison)
    rec = Reconciler(log, None, NoPublisher(), batch=batch, environment_errors=(ConnectionError,))  # type: ignore[arg-type]  # this test reads events only: no sweep store is used
    asyncio.run(_rounds(rec, 400))
    assert log.cursor == rows[-1][0]
    assert sorted(e.item_id for e in log.applied) == sorted(f"i{k}" for k in range(1, n + 1) if f"i{k}" not in poison)
    assert rec.bad.get("unprocessable", 0) == len(poison)


def test_an_outage_skips_nothing_and_a_defect_in_every_row_skips_only_a_few() -> None:
    rows: list[tuple[Position, ItemEvent | Unreadable]] = [(Position("1", k), _event(k)) for k in range(1, 31)]
    log = PoisonLog(rows, set())
    log.down = True
    rec = Reconciler(log, None, NoPublisher(), batch=8, environment_errors=(ConnectionError,))  # type: ignore[arg-type]  # this test reads events only: no sweep store is used
    asyncio.run(_rounds(rec, 50))
    assert log.cursor == Position("0", 0) and not rec.bad, "an outage is retried, never skipped over"
    log.down = False
    log.poison = {f"i{k}" for k in range(1, 31)}  # a defect: every row fails
    asyncio.run(_rounds(rec, 200))
    assert rec.bad == {"unprocessable": rec.max_skips_in_row}, "the tail holds after a few skips in a row"
    assert log.cursor == rows[rec.max_skips_in_row - 1][0]

