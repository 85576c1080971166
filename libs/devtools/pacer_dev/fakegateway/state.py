"""In-memory recording, outcome decisions and statistics of the fake gateway.

Pure logic (no web imports) so the rules that tests and demos rely on, such as
duplicate counting, min-interval enforcement and per-guid concurrency, can be
unit-tested without a server. Not thread-safe: it is driven from one event loop.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pacer_dev.fakegateway.config import GatewayConfig

CODE_OK = 0
CODE_RETRYABLE = -1
CODE_OFFLINE = 1001
CODE_KICKED = 1002
CODE_UNAUTHORIZED = 1003
CODE_BAD_PARAMS = 40001
CODE_RATE_LIMITED = 45009
NEEDS_HUMAN_CODES: tuple[int, ...] = (CODE_OFFLINE, CODE_KICKED, CODE_UNAUTHORIZED)
HTTP_BAD_GATEWAY = 502
HTTP_TOO_MANY_REQUESTS = 429

MESSAGES: dict[int, str] = {
    CODE_OK: "ok",
    CODE_RETRYABLE: "system busy",
    CODE_OFFLINE: "account offline",
    CODE_KICKED: "account kicked out",
    CODE_UNAUTHORIZED: "account unauthorized",
    CODE_BAD_PARAMS: "invalid params",
    CODE_RATE_LIMITED: "freq limit",
}


def message_for(code: int) -> str:
    """Human-readable ``msg`` for a gateway code."""
    return MESSAGES.get(code, "error")


@dataclass(slots=True)
class SendRecord:
    """One accepted send, as the gateway would have delivered it."""

    seq: int
    msg_id: str
    guid: str
    to_id: str
    content: str
    idempotency_key: str | None
    at: float
    at_mono: float
    dropped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "msgId": self.msg_id,
            "guid": self.guid,
            "toId": self.to_id,
            "content": self.content,
            "idempotencyKey": self.idempotency_key,
            "at": self.at,
            "at_mono": self.at_mono,
            "dropped": self.dropped,
        }


@dataclass(slots=True, frozen=True)
class Outcome:
    """What to answer: a JSON ``code`` (with the record when accepted) or an HTTP 5xx.

    ``drop`` means the send was accepted and recorded but no response must reach
    the caller. ``retry_after_s``: the ``Retry-After`` header's seconds (an HTTP 429).
    """

    code: int
    msg: str
    record: SendRecord | None = None
    http_status: int = 200
    drop: bool = False
    retry_after_s: int | None = None


class GatewayState:
    """Config, RNG, recorded sends and counters of one fake gateway instance."""

    def __init__(self, config: GatewayConfig | None = None) -> None:
        self.config = config or GatewayConfig()
        self._seed_rngs(self.config.seed)
        # Live in-flight counts survive reset(): requests may be running across it.
        self._inflight: dict[str, int] = {}
        self._inflight_total = 0
        self.reset()

    def _seed_rngs(self, seed: int | None) -> None:
        # Separate streams: outcomes stay reproducible whatever the latency draws.
        self._outcome_rng = random.Random(seed)
        self._latency_rng = random.Random(None if seed is None else seed + 1)
        self._id_rng = random.Random(None if seed is None else seed + 2)

    def reset(self) -> None:
        """Forget every send and counter; the config is kept."""
        self.records: list[SendRecord] = []
        self._by_guid: dict[str, list[SendRecord]] = {}
        self._by_key: dict[str, list[SendRecord]] = {}
        self._by_triple: dict[tuple[str, str, str], list[SendRecord]] = {}
        self._keyless_triples: dict[tuple[str, str, str], int] = {}
        self._last_accept_mono: dict[str, float] = {}
        # guid → when (monotonic) the quiet asked of it by a 429's Retry-After ends
        self._quiet_until: dict[str, float] = {}
        # guid → (the idempotency key of the send whose 429 asked its quiet, which call of that
        # key it was): a violation names the call that asked the quiet it broke
        self._quiet_asker: dict[str, tuple[str | None, int]] = {}
        self._calls_by_key: dict[str | None, int] = {}  # valid sends, by idempotency key
        self.quiet_asked = 0
        self.quiet_violations = 0
        self.quiet_violated: list[dict[str, Any]] = []  # per violation: {"guid", "key", "call"} that asked the quiet
        self.duplicate_keys = 0
        self.duplicate_triples = 0
        self.duplicate_triples_all = 0
        self.interval_violations = 0
        self.rejected_by_code: dict[int, int] = {}
        self.http_5xx = 0
        self.dropped_responses = 0
        self.lookups_delayed = 0
        self.max_concurrency_per_guid = 0
        self.max_concurrency_guid: str | None = None
        self.max_concurrency_total = 0

    def update_config(self, changes: Mapping[str, Any]) -> GatewayConfig:
        """Apply a partial knob update; a new ``seed`` re-seeds the RNGs."""
        self.config = self.config.updated(changes)
        if "seed" in changes:
            self._seed_rngs(self.config.seed)
        return self.config

    def enter(self, guid: str) -> None:
        """Mark a request for ``guid`` as in progress (call ``leave`` when done)."""
        n = self._inflight.get(guid, 0) + 1
        self._inflight[guid] = n
        if n > self.max_concurrency_per_guid:
            self.max_concurrency_per_guid = n
            self.max_concurrency_guid = guid
        self._inflight_total += 1
        self.max_concurrency_total = max(self.max_concurrency_total, self._inflight_total)

    def leave(self, guid: str) -> None:
        n = self._inflight.get(guid, 0) - 1
        if n > 0:
            self._inflight[guid] = n
        else:
            self._inflight.pop(guid, None)
        self._inflight_total = max(0, self._inflight_total - 1)

    def latency_s(self) -> float:
        """Processing delay for the next request, in seconds."""
        cfg = self.config
        ms = cfg.latency_ms
        if cfg.latency_jitter_ms > 0:
            ms += self._latency_rng.uniform(0.0, cfg.latency_jitter_ms)
        return ms / 1000.0

    def reject_malformed(self) -> Outcome:
        """Count and answer a request whose body is not a valid sendText payload."""
        return self._reject(CODE_BAD_PARAMS)

    def submit(
        self,
        guid: str,
        to_id: str,
        content: str,
        idempotency_key: str | None,
        *,
        now_mono: float | None = None,
        now_wall: float | None = None,
    ) -> Outcome:
        """Decide the outcome of one valid send and record it when accepted. With
        ``retry_after_s``, a rate-limited one is an HTTP 429 asking the guid for that long a
        quiet; a send of the guid before it ends is counted in ``quiet_violations`` (and named
        in ``quiet_violated``) and refused the same way, for the time left (the quiet is not
        extended)."""
        now = time.monotonic() if now_mono is None else now_mono
        self._calls_by_key[idempotency_key] = call = self._calls_by_key.get(idempotency_key, 0) + 1
        quiet = self._quiet_until.get(guid)
        if quiet is not None and now < quiet:
            self.quiet_violations += 1
            key, nth = self._quiet_asker[guid]
            self.quiet_violated.append({"guid": guid, "key": key, "call": nth})
            return replace(self._reject(CODE_RATE_LIMITED), http_status=HTTP_TOO_MANY_REQUESTS,
                           retry_after_s=math.ceil(quiet - now))
        outcome = self._decide(guid, to_id, content, idempotency_key, now, now_wall)
        wait = math.ceil(self.config.retry_after_s)
        if outcome.code == CODE_RATE_LIMITED and wait > 0:
            self.quiet_asked += 1
            self._quiet_until[guid] = now + wait
            self._quiet_asker[guid] = (idempotency_key, call)
            return replace(outcome, http_status=HTTP_TOO_MANY_REQUESTS, retry_after_s=wait)
        return outcome

    def _decide(self, guid: str, to_id: str, content: str, idempotency_key: str | None, now: float,
                now_wall: float | None) -> Outcome:
        cfg = self.config
        forced = cfg.fail_guids.get(guid)
        if forced is not None:
            return self._reject(forced)
        interval_ms = cfg.guid_min_interval_ms.get(guid, cfg.min_interval_ms)
        if interval_ms > 0:
            last = self._last_accept_mono.get(guid)
            if last is not None and (now - last) * 1000.0 < interval_ms:
                self.interval_violations += 1
                return self._reject(CODE_RATE_LIMITED)
        failure = self._draw_failure(cfg)
        if failure is not None:
            return failure
        record = self._record(guid, to_id, content, idempotency_key, now, now_wall)
        drop = cfg.p_drop_after_accept > 0 and self._outcome_rng.random() < cfg.p_drop_after_accept
        if drop:
            record.dropped = True
            self.dropped_responses += 1
        return Outcome(CODE_OK, "ok", record=record, drop=drop)

    def _draw_failure(self, cfg: GatewayConfig) -> Outcome | None:
        total = (
            cfg.p_http_5xx + cfg.p_retryable + cfg.p_needs_human + cfg.p_bad_params + cfg.p_rate_limited
        )
        if total <= 0:
            return None
        u = self._outcome_rng.random()
        if u < cfg.p_http_5xx:
            self.http_5xx += 1
            return Outcome(CODE_RETRYABLE, "bad gateway", http_status=HTTP_BAD_GATEWAY)
        u -= cfg.p_http_5xx
        if u < cfg.p_retryable:
            return self._reject(CODE_RETRYABLE)
        u -= cfg.p_retryable
        if u < cfg.p_needs_human:
            return self._reject(self._outcome_rng.choice(NEEDS_HUMAN_CODES))
        u -= cfg.p_needs_human
        if u < cfg.p_bad_params:
            return self._reject(CODE_BAD_PARAMS)
        u -= cfg.p_bad_params
        if u < cfg.p_rate_limited:
            return self._reject(CODE_RATE_LIMITED)
        return None

    def _reject(self, code: int) -> Outcome:
        self.rejected_by_code[code] = self.rejected_by_code.get(code, 0) + 1
        return Outcome(code, message_for(code))

    def _record(
        self,
        guid: str,
        to_id: str,
        content: str,
        key: str | None,
        now_mono: float,
        now_wall: float | None,
    ) -> SendRecord:
        msg_id = str(uuid.UUID(int=self._id_rng.getrandbits(128), version=4))
        wall = time.time() if now_wall is None else now_wall
        record = SendRecord(len(self.records), msg_id, guid, to_id, content, key, wall, now_mono)
        self.records.append(record)
        self._by_guid.setdefault(guid, []).append(record)
        self._last_accept_mono[guid] = now_mono
        triple = (guid, to_id, content)
        same_triple = self._by_triple.setdefault(triple, [])
        if same_triple:
            self.duplicate_triples_all += 1
        same_triple.append(record)
        if key:
            same_key = self._by_key.setdefault(key, [])
            if same_key:
                self.duplicate_keys += 1
            same_key.append(record)
        else:
            seen = self._keyless_triples.get(triple, 0)
            if seen:
                self.duplicate_triples += 1
            self._keyless_triples[triple] = seen + 1
        return record

    def lookup(
        self,
        guid: str,
        idempotency_key: str | None = None,
        to_id: str | None = None,
        content: str | None = None,
    ) -> list[SendRecord]:
        """Accepted sends of ``guid`` matching a key, or else a (toId, content) pair."""
        if idempotency_key:
            return [r for r in self._by_key.get(idempotency_key, ()) if r.guid == guid]
        if to_id is not None and content is not None:
            return list(self._by_triple.get((guid, to_id, content), ()))
        raise ValueError("lookup needs idempotencyKey, or toId and content")

    def sends(self, guid: str | None = None, limit: int = 100, offset: int = 0) -> list[SendRecord]:
        """Recorded sends in acceptance order, optionally for one guid."""
        source = self.records if guid is None else self._by_guid.get(guid, [])
        return source[offset : offset + limit]

    def count_sends(self, guid: str | None = None) -> int:
        return len(self.records) if guid is None else len(self._by_guid.get(guid, ()))

    def stats(self, detail: bool = False) -> dict[str, Any]:
        """Counters as a JSON-ready dict (``by_guid_count`` only with ``detail``)."""
        out: dict[str, Any] = {
            "sends": len(self.records),
            "unique_keys": len(self._by_key),
            "duplicates": self.duplicate_keys + self.duplicate_triples,
            "duplicate_keys": self.duplicate_keys,
            "duplicate_triples": self.duplicate_triples,
            "duplicate_triples_all": self.duplicate_triples_all,
            "interval_violations": self.interval_violations,
            "rejected_by_code": {str(k): v for k, v in sorted(self.rejected_by_code.items())},
            "http_5xx": self.http_5xx,
            "dropped_responses": self.dropped_responses,
            "lookups_delayed": self.lookups_delayed,
            "quiet_asked": self.quiet_asked,
            "quiet_violations": self.quiet_violations,
            "quiet_violated": list(self.quiet_violated),
            "max_concurrency_per_guid": self.max_concurrency_per_guid,
            "max_concurrency_guid": self.max_concurrency_guid,
            "max_concurrency_total": self.max_concurrency_total,
            "inflight": self._inflight_total,
            "first_send_at": self.records[0].at if self.records else None,
            "last_send_at": self.records[-1].at if self.records else None,
        }
        if detail:
            out["by_guid_count"] = {g: len(rs) for g, rs in self._by_guid.items()}
        return out
