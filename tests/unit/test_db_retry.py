"""``with_retry``: a unit of work is retried on transient database errors only, within its deadline."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from pacer_common.db.errors import TRANSIENT_ERRORS, TRANSIENT_KINDS, ConflictError, TransientError, with_retry


def run(work: object, deadline_s: float = 5.0) -> object:
    return asyncio.run(with_retry(work, deadline_s=deadline_s))  # type: ignore[arg-type]


def test_a_transient_failure_is_retried_until_the_work_succeeds() -> None:
    calls = 0

    async def work() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return "done"

    assert run(work) == "done"
    assert calls == 3


def test_any_other_error_is_raised_at_once() -> None:
    calls = 0

    async def work() -> str:
        nonlocal calls
        calls += 1
        raise psycopg.errors.UndefinedTable("no such table")

    with pytest.raises(psycopg.errors.UndefinedTable):
        run(work)
    assert calls == 1


def test_the_deadline_counts_from_the_first_attempt() -> None:
    calls = 0

    async def work() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)  # the first attempt alone outlasts the deadline
        raise psycopg.OperationalError("connection refused")

    with pytest.raises(TransientError):
        run(work, deadline_s=0.02)
    assert calls == 1, "no attempt may start after the deadline"


@pytest.mark.parametrize(("exc", "kind"), [
    (psycopg.errors.DeadlockDetected("deadlock detected"), "deadlock"),
    (psycopg.errors.SerializationFailure("could not serialize access"), "serialization_failure"),
    (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), "server_shutdown"),
    (psycopg.errors.CannotConnectNow("the database system is starting up"), "server_shutdown"),
    (psycopg.OperationalError("server closed the connection unexpectedly"), "connection"),
])
def test_each_transient_failure_is_counted_by_its_kind(exc: psycopg.Error, kind: str) -> None:
    calls = 0

    async def work() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise exc
        return "done"

    before = dict(TRANSIENT_ERRORS)
    assert run(work) == "done"
    after = dict(TRANSIENT_ERRORS)
    assert {k: after.get(k, 0) - before.get(k, 0) for k in TRANSIENT_KINDS} == {
        k: int(k == kind) for k in TRANSIENT_KINDS}


def test_an_error_not_worth_retrying_is_not_counted() -> None:
    async def work() -> str:
        raise psycopg.errors.UniqueViolation("duplicate key")

    before = dict(TRANSIENT_ERRORS)
    with pytest.raises(ConflictError):
        run(work)
    assert dict(TRANSIENT_ERRORS) == before
