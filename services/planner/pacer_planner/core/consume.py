"""The intake loop: every job request to its end, in order, whatever happens while handling it.

Each request ends as a job or as a dead-letter record; only then does its offset move. What
goes wrong while handling one is one of three things, told apart here and nowhere else:

- **the message's fault** (invalid, refused by admission or by the database): the planner
  dead-letters it with the reason (``intake``) and the loop goes on;
- **the environment's** (the database or the broker unavailable; ``IntakePolicy.environment``):
  the same message is tried again with backoff, for as long as it takes. Nothing is
  dead-lettered and nothing is skipped; the partition waits, as it must;
- **anything else** is a programming error: the message is tried ``internal_attempts``
  times, then dead-lettered as ``internal error: <type>: <message>`` (traceback logged,
  counted), so one message cannot crash-loop the planner. A request whose job is already
  stored is never dead-lettered: it is a job, left with ``dispatched_at`` empty and its items
  pending in Postgres; publishing the request again re-sends their commands.

The dead-letter produce is itself retried as an environment fault: an offset moves only
once the record is acknowledged. A stop ends the loop after the request in hand: the rest of
its batch is left uncommitted, for whoever owns the partition next. Every log line about a
request names its topic, partition, offset and key, parsed or not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_never,
    wait_exponential_jitter,
)

from pacer_common import tracing
from pacer_common.logs import bind
from pacer_planner.core.intake import DispatchFailed, Handled, Planner

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_ERROR_CHARS = 500


class RequestMessage(Protocol):
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[tuple[str, bytes | None]] | None: ...
    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...


class RequestSource(Protocol):
    """Job requests in arrival order, and where to resume after a restart."""

    async def consume(self, n: int, timeout_s: float) -> Sequence[Any]: ...
    async def commit(self, msg: Any) -> None: ...


class IntakeEvents(Protocol):
    def handled(self, result: Handled) -> None: ...
    def environment_fault(self) -> None: ...
    def internal_error(self) -> None: ...


@dataclass(frozen=True)
class IntakePolicy:
    environment: tuple[type[BaseException], ...]  # the database's and the broker's errors
    internal_attempts: int = 3
    commit_attempts: int = 5
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0


class Stopped(Exception):
    """The service is stopping while a message waits for the environment: not committed."""


class IntakeLoop:
    def __init__(self, planner: Planner, source: RequestSource, policy: IntakePolicy, events: IntakeEvents,
                 stop: asyncio.Event, on_paging: Callable[[str], Any] = lambda job_id: None) -> None:
        self.planner = planner
        self.source = source
        self.policy = policy
        self.events = events
        self.stop = stop
        self.on_paging = on_paging

    async def run(self) -> None:
        """Consume until ``stop``. A consumer that fails outright (a fatal Kafka error) ends
        the loop with its error: a new consumer is what it needs."""
        while not self.stop.is_set():
            for msg in await self.source.consume(16, 0.5):
                if self.stop.is_set():  # the rest of the batch is not committed: read again by the next owner
                    return
                # The request's trace (its traceparent header) or a new one: the job's items carry it.
                with tracing.span("plan job request", tracing.from_kafka(msg.headers()), "consumer"), \
                        bind(**position(msg)):
                    result = await self._handle(msg)
                if result is None:
                    return
                self.events.handled(result)
                if result.paging and result.job_id:
                    self.on_paging(result.job_id)  # the job row holds the cursor: safe to start now

    async def _handle(self, msg: RequestMessage) -> Handled | None:
        """The request handled and its offset committed; None once stopped."""
        try:
            result = await self.process(msg.key(), msg.value() or b"")
            # The job and its commands (or the dead-letter record) are durable: only now may the offset move.
            await self._commit(msg)
        except Stopped:
            return None
        return result

    async def _commit(self, msg: Any) -> None:
        try:
            await self._patiently(lambda: self.source.commit(msg), self.policy.commit_attempts)
        except self.policy.environment as exc:
            # The request's effects are durable; a redelivery (to whoever owns the partition
            # now) finds its job, or dead-letters it once more. A later commit covers it.
            log.warning("offset not committed after %d attempts: %s", self.policy.commit_attempts, _text(exc))

    async def process(self, key: bytes | None, value: bytes) -> Handled:
        """Handle one request to its end: a job, or a dead-letter record. Raises only
        :class:`Stopped`."""
        failures = 0
        while True:
            try:
                return await self._patiently(lambda: self.planner.handle(key, value))
            except Stopped:
                raise
            except Exception as exc:
                failures += 1
                self.events.internal_error()
                log.error("internal error handling a job request (attempt %d of %d)", failures,
                          self.policy.internal_attempts, exc_info=exc)
                if failures >= self.policy.internal_attempts:
                    return await self._give_up(key, value, exc)
                await self._pause(self._delay(failures))

    async def _give_up(self, key: bytes | None, value: bytes, exc: Exception) -> Handled:
        if isinstance(exc, DispatchFailed):
            # Stored: the request is a job and must not also be a dead-letter record.
            log.error("job %s stored but not dispatched; moving on: its items are pending in Postgres, and "
                      "publishing the request again re-sends their commands", exc.job_id)
            return Handled("undispatched", exc.job_id, reason=_text(exc.__cause__ or exc))
        reason = f"internal error: {_text(exc)}"
        return await self._patiently(lambda: self.planner.reject(key, value, reason))

    async def _patiently(self, work: Callable[[], Awaitable[T]], attempts: int | None = None) -> T:
        """``work``, retried with backoff for as long as the environment is at fault (or ``attempts`` times)."""
        retrying = AsyncRetrying(
            retry=retry_if_exception(self._environmental),
            stop=stop_never if attempts is None else stop_after_attempt(attempts),
            wait=wait_exponential_jitter(multiplier=self.policy.backoff_initial_s, max=self.policy.backoff_max_s,
                                         jitter=self.policy.backoff_initial_s),
            sleep=self._pause,
            before_sleep=self._waiting,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await work()
        raise AssertionError("unreachable")

    def _environmental(self, exc: BaseException) -> bool:
        cause = exc.__cause__ if isinstance(exc, DispatchFailed) else exc
        return isinstance(cause, self.policy.environment)

    def _waiting(self, state: RetryCallState) -> None:
        self.events.environment_fault()
        exc = state.outcome.exception() if state.outcome else None
        log.warning("environment fault, trying the same request again (attempt %d): %s",
                    state.attempt_number, _text(exc.__cause__ if isinstance(exc, DispatchFailed) else exc))

    def _delay(self, n: int) -> float:
        return min(self.policy.backoff_max_s, self.policy.backoff_initial_s * 2 ** (n - 1))

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except TimeoutError:
            return
        raise Stopped()


def _text(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown"
    text = f"{type(exc).__name__}: {exc}".strip().removesuffix(":")
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def position(msg: RequestMessage) -> dict[str, Any]:
    """Where a request is (topic, partition, offset) and its key as published (the request id,
    as publishers key them), for every log line about it: an error logged before the request
    is parsed, or for one that cannot be, still names it."""
    key = msg.key()
    return {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
            "request_key": None if key is None else key.decode("utf-8", "replace")[:MAX_ERROR_CHARS]}
