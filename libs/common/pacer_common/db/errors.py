"""Driver errors translated in one place. Only :class:`TransientError` is worth retrying."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
from psycopg import errors as pgerr
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential_jitter

T = TypeVar("T")

log = logging.getLogger(__name__)

# Units of work that failed with a transient error in this process, by kind (transient_kind),
# whether or not a retry then succeeded: ``pacer_db_transient_errors_total{error}``.
TRANSIENT_ERRORS: Counter[str] = Counter()
TRANSIENT_KINDS = ("deadlock", "serialization_failure", "server_shutdown", "connection")


class DatabaseError(Exception):
    """Base of Pacer's database errors."""


class TransientError(DatabaseError):
    """Connection lost, server restarting, serialization failure: safe to retry the unit of work."""


class ConflictError(DatabaseError):
    """A uniqueness or guard conflict: retrying the same write will not help."""


class RefusedError(DatabaseError):
    """A statement past one of the server's limits for what it holds (an index row too large,
    a statement too complex): the input's fault, never worth retrying."""


_TRANSIENT = (
    psycopg.OperationalError,
    pgerr.SerializationFailure,
    pgerr.DeadlockDetected,
    pgerr.AdminShutdown,
    pgerr.CannotConnectNow,
)


def translate(exc: BaseException) -> BaseException:
    # Class 54 (program_limit_exceeded) is an OperationalError to psycopg, but waiting does
    # not shrink an index row: checked before the transient ones so it is not retried.
    if isinstance(exc, pgerr.ProgramLimitExceeded):
        return RefusedError(str(exc))
    if isinstance(exc, _TRANSIENT):
        return TransientError(str(exc))
    if isinstance(exc, pgerr.UniqueViolation):
        return ConflictError(str(exc))
    return exc


def transient_kind(exc: psycopg.Error) -> str:
    """The kind of a transient error, one of :data:`TRANSIENT_KINDS`."""
    if isinstance(exc, pgerr.DeadlockDetected):
        return "deadlock"
    if isinstance(exc, pgerr.SerializationFailure):
        return "serialization_failure"
    if isinstance(exc, (pgerr.AdminShutdown, pgerr.CannotConnectNow)):
        return "server_shutdown"
    return "connection"


async def with_retry(work: Callable[[], Awaitable[T]], *, deadline_s: float = 60.0) -> T:
    """Run a whole unit of work (its own transaction), retrying it only on transient errors.

    A pool pool whose server restarted hands out broken connections; each attempt takes a
    fresh one, so a Postgres restart costs a pause, not a crash.

    The first attempt runs without tenacity: setting up its retry loop costs more than a
    batched statement (py-spy: 10-15% of a sender's CPU at 3,000 paced guids). A first
    attempt that fails transiently becomes the loop's first attempt, so the waits and the
    deadline (counted from the first attempt) are as if the loop had run it.
    """
    started = time.monotonic()
    try:
        return await _attempt(work)
    except TransientError as first:
        failed: TransientError | None = first
    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type(TransientError),
        stop=stop_after_delay(max(0.0, deadline_s - (time.monotonic() - started))),
        wait=wait_exponential_jitter(multiplier=0.05, max=2.0, jitter=0.1),
        reraise=True,
    ):
        with attempt:
            if failed is not None:
                again, failed = failed, None
                raise again
            return await _attempt(work)
    raise AssertionError("unreachable")


async def _attempt(work: Callable[[], Awaitable[T]]) -> T:
    try:
        return await work()
    except psycopg.Error as exc:
        err = translate(exc)
        if isinstance(err, TransientError):
            kind = transient_kind(exc)
            TRANSIENT_ERRORS[kind] += 1
            if kind == "deadlock":
                # Postgres broke a cycle of lock waits, and the unit of work runs again: nothing
                # is lost, but the cycle is two transactions taking rows in opposite orders.
                log.warning("a deadlock was broken and the unit of work runs again: %s; %s",
                            str(exc).strip(), exc.diag.message_detail or "",
                            extra={"sqlstate": exc.sqlstate, "error": kind})
        raise err from exc
