"""The sender's background loops never end on an error: a round that fails, whatever the
error (the database's or a bug's), is logged with it, counted, and the loop goes on — the
hot limits' further apart while they keep failing, the lease renewals still three per TTL.
A loop that ended on an exception would end silently (its task is awaited only at shutdown):
limit changes no longer applied, idle leases never given back. On virtual time."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from pacer_common.lifecycle import attempt, every
from pacer_sender.domain.pacing import Limits
from pacer_sender.leases import GuidLeases
from pacer_sender.limits import REFRESH_BACKOFF_MAX_S, LimitsBook
from pacer_sender.ports import Slowdown

from .dispatching import now, run_virtual, until
from .fakes import InMemoryGuidLeases


class Broken(Exception):
    """Not the database being away (``TransientError``): a bug, a row that cannot be read."""


class FlakySource:
    """``guid_limits`` whose reads raise ``Broken`` ``failures`` times, then find a change."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.reads: list[float] = []

    async def changed_since(self, after: int | None) -> list[tuple[str, dict[str, Any], int]]:
        self.reads.append(now())
        if len(self.reads) <= self.failures:
            raise Broken("column limits is not JSON")
        return [("g", {"min_interval_s": 7.0}, 1)] if after is None else []


def test_hot_limits_go_on_being_read_after_any_error_further_apart_while_it_lasts(
        caplog: pytest.LogCaptureFixture) -> None:
    failures = 8
    source, errors = FlakySource(failures), []
    book = LimitsBook(Limits(min_interval_s=1.0), source)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(book.keep_fresh(stop, 1.0, lambda: errors.append(now())))
        await until(lambda: book("g").min_interval_s == 7.0, timeout=3600)
        stop.set()
        await task

    with caplog.at_level(logging.ERROR):
        run_virtual(scenario())
    assert len(errors) == failures, "each failed round counted"
    assert sum("reading hot limits" in r.getMessage() and r.exc_info is not None for r in caplog.records) == failures
    waits = [b - a for a, b in itertools.pairwise(source.reads)][:failures]
    assert waits[:5] == pytest.approx([2.0, 4.0, 8.0, 16.0, REFRESH_BACKOFF_MAX_S]), "backing off while reads fail"
    assert max(waits) == pytest.approx(REFRESH_BACKOFF_MAX_S)


class FlakyLeases(InMemoryGuidLeases):
    """A lease store whose next ``renew_failures`` renewals and ``write_failures`` penalty
    writes raise ``Broken``; ``renewed`` notes when each renewal was asked."""

    def __init__(self, renew_failures: int, write_failures: int) -> None:
        super().__init__(ttl=30.0)
        self.renew_failures, self.write_failures = renew_failures, write_failures
        self.renewed: list[float] = []

    async def renew(self, held: Mapping[str, int], owner: str) -> dict[str, float | None]:
        self.renewed.append(now())
        if self.renew_failures:
            self.renew_failures -= 1
            raise Broken("renew_guids: unexpected row")
        return await super().renew(held, owner)

    async def penalize(self, penalties: Mapping[str, Slowdown], since: Callable[[], float] = lambda: 0.0) -> None:
        if self.write_failures:
            self.write_failures -= 1
            raise Broken("penalize_guids: unexpected row")
        await super().penalize(penalties, since)


def test_lease_renewals_go_on_after_any_error_three_per_ttl_and_idle_leases_are_given_back() -> None:
    store, errors = FlakyLeases(renew_failures=2, write_failures=1), []
    leases = GuidLeases(store, "me", 30.0)

    async def scenario() -> None:
        assert await leases.acquire("busy") is not None and await leases.acquire("idle") is not None
        leases.penalized("busy", 4.0)  # a fall, written with the renewal
        leases.idle = lambda: ["idle"] if len(store.renewed) >= 3 else []
        stop = asyncio.Event()
        task = asyncio.create_task(leases.keep_renewed(stop, lambda: errors.append(now())))
        await until(lambda: len(store.renewed) == 4, timeout=3600)
        stop.set()
        await task

    run_virtual(scenario())
    assert len(errors) == 3, "two failed renewals and a failed penalty write, each counted"
    assert [b - a for a, b in itertools.pairwise(store.renewed)] == pytest.approx([10.0] * 3), "three rounds per TTL"
    assert set(leases.held) == {"busy"} and store.rows["idle"].owner is None, "the idle lease was given back"
    assert store.rows["busy"].penalty == 4.0, "the penalty a failed write kept went with the next round"


def test_a_round_that_fails_is_logged_counted_and_the_loop_goes_on_until_stopped() -> None:
    rounds, errors = [], []

    async def step() -> None:
        rounds.append(now())
        raise Broken("every round")

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(every(step, stop, 5.0, "a step", lambda: errors.append(1)))
        await until(lambda: len(rounds) == 4, timeout=3600)
        stop.set()
        await task

    run_virtual(scenario())
    assert [b - a for a, b in itertools.pairwise(rounds)][:3] == pytest.approx([5.0] * 3), "no backoff unless asked"
    assert len(errors) == len(rounds)


def test_a_cancelled_round_is_not_swallowed() -> None:
    async def step() -> None:
        raise asyncio.CancelledError

    async def scenario() -> None:
        await attempt(step, "a step", lambda: pytest.fail("a cancellation is no failure"))

    with pytest.raises(asyncio.CancelledError):
        run_virtual(scenario())
