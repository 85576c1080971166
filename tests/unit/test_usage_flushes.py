"""A sender's flushes of its tenant send counts: numbered, a failed one resent verbatim before
any newer sends, so the database (which applies a flush only past the sender's last seq) adds
every send once, whatever answers are lost."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pacer_common.db.tenants import add_usage
from pacer_common.domain.quota import DailyUsage, Flush

ENDS = 1_000_000.0  # the tenants' day ends here, as the database said
NOW = ENDS - 60


@dataclass
class FakeUsageTable:
    """``tenant_usage.sql`` in memory: a flush adds its sends only past its sender's last seq."""

    sends: Counter[str] = field(default_factory=Counter)
    last_seq: dict[str, int] = field(default_factory=dict)

    def apply(self, flush: Flush) -> dict[str, tuple[float, int]]:
        if flush.sends and flush.seq > self.last_seq.get(flush.sender, 0):
            self.last_seq[flush.sender] = flush.seq
            self.sends.update(flush.sends)
        return {t: (ENDS, n) for t, n in self.sends.items()}


Outcome = Literal["ok", "answer_lost", "failed"]


class Gone(Exception):
    """The statement's answer never came (the connection dropped): whether it ran is unknown."""


@dataclass
class FakePool:
    """Stands in for the database under ``add_usage`` (the real one is in
    tests/integration/test_tenant_usage_flushes.py): each statement is ``tenant_usage.sql``'s
    flush, read back from its parameters and applied to ``db``, or not, as ``outcomes`` say
    for the next statements (then "ok"); ``hold`` keeps a statement waiting until it is set."""

    db: FakeUsageTable
    outcomes: list[Outcome] = field(default_factory=list)
    hold: asyncio.Event | None = None

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[FakePool]:
        yield self

    async def execute(self, _query: str, params: dict[str, Any]) -> FakePool:
        if self.hold is not None:
            await self.hold.wait()
        outcome = self.outcomes.pop(0) if self.outcomes else "ok"
        if outcome == "failed":
            raise Gone("before it ran")
        flush = Flush(params["sender"], params["seq"], dict(zip(params["tenants"], params["sends"], strict=True)))
        self.rows = [{"tenant": t, "ends_at": e, "sends": n} for t, (e, n) in self.db.apply(flush).items()]
        if outcome == "answer_lost":
            raise Gone("after it committed")
        return self

    async def fetchall(self) -> list[dict[str, Any]]:
        return self.rows


def round_of(usage: DailyUsage, db: FakeUsageTable, outcome: Outcome) -> None:
    """One round of the real ``add_usage``; ``outcome`` is its first statement's: applied and
    answered, applied with its answer lost, not applied."""
    with contextlib.suppress(Gone):
        asyncio.run(add_usage(FakePool(db, [outcome]), usage))  # type: ignore[arg-type]  # the statement's shape only


def test_a_failed_flush_is_resent_verbatim_and_newer_sends_go_in_the_next_seq() -> None:
    u = DailyUsage(sender="s-1:abcdef012345")
    u.count("acme")
    u.count("acme")
    first = u.flush()
    assert first == Flush("s-1:abcdef012345", 1, {"acme": 2})
    # no answer: the flush stays pending, and sends counted meanwhile stay out of it
    u.count("acme")
    u.count("globex")
    assert u.resending
    assert u.flush() == first and u.flush() is first
    u.flushed(first, {"acme": (ENDS, 2)})
    assert not u.resending
    second = u.flush()
    assert second == Flush("s-1:abcdef012345", 2, {"acme": 1, "globex": 1})
    u.flushed(second, {"acme": (ENDS, 3), "globex": (ENDS, 1)})
    assert u.used("acme", NOW) == 3 and u.used("globex", NOW) == 1 and not u.resending


def test_with_nothing_sent_a_flush_takes_no_seq_and_adds_nothing() -> None:
    u = DailyUsage()
    empty = u.flush()
    assert empty.sends == {} and empty.seq == 0 and not u.resending
    u.flushed(empty, {"acme": (ENDS, 7)})
    u.count("acme")
    assert u.flush().seq == 1


def test_a_pending_flush_counts_against_the_quota_until_the_totals_read_with_it_are_in() -> None:
    u = DailyUsage()
    u.absorb({"acme": (ENDS, 5)})
    u.count("acme")
    u.count("acme")
    flush = u.flush()  # sent; its answer is lost
    assert u.used("acme", NOW) == 7 and not u.allows("acme", 7, NOW)
    u.count("acme")
    assert u.used("acme", NOW) == 8
    u.flushed(u.flush(), {"acme": (ENDS, 7)})  # resent: the database had it (or has it now)
    assert flush.seq == 1 and u.used("acme", NOW) == 8
    u.flushed(u.flush(), {"acme": (ENDS, 8)})
    assert u.used("acme", NOW) == 8


def test_each_count_gets_its_own_default_sender_name() -> None:
    assert DailyUsage().sender != DailyUsage().sender


def test_through_lost_answers_and_failures_every_send_is_added_exactly_once() -> None:
    rng = random.Random(20261207)
    outcomes: tuple[Outcome, ...] = ("ok", "answer_lost", "failed")
    for _ in range(200):
        db = FakeUsageTable()
        senders = [DailyUsage() for _ in range(3)]
        counted: Counter[str] = Counter()
        for _ in range(30):
            for u in senders:
                for _ in range(rng.randrange(4)):
                    tenant = rng.choice(("acme", "globex"))
                    u.count(tenant)
                    counted[tenant] += 1
                round_of(u, db, rng.choices(outcomes, (6, 2, 2))[0])
        for u in senders:  # the database answers again: a last round each
            round_of(u, db, "ok")
            assert not u.resending and not u.unflushed
        assert db.sends == counted
        for u in senders:  # and each reads the others' last sends
            round_of(u, db, "ok")
            assert all(u.used(t, NOW) == counted[t] for t in counted)


def test_a_flush_cancelled_at_shutdown_stays_pending_and_is_resent_as_it_was() -> None:
    db, u = FakeUsageTable(), DailyUsage()
    u.count("acme")
    u.count("acme")

    async def cancelled_mid_statement() -> None:
        pool = FakePool(db, hold=asyncio.Event())
        task = asyncio.create_task(add_usage(pool, u))  # type: ignore[arg-type]  # the statement's shape only
        for _ in range(1000):  # until the flush is made and its statement sent
            if u.resending:
                break
            await asyncio.sleep(0)
        assert u.resending
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_mid_statement())
    assert u.pending == Flush(u.sender, 1, {"acme": 2}) and db.sends == Counter()
    round_of(u, db, "ok")
    assert db.sends == Counter({"acme": 2}) and db.last_seq == {u.sender: 1} and not u.resending
