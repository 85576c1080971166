"""``with_retry``: a unit of work is retried on transient database errors only, within its deadline."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from pacer_common.db.errors import TransientError, with_retry


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
