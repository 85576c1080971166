"""The sender's settings (``PACER_SENDER_*``), read in ``main()``."""

from __future__ import annotations

import os
import socket
import uuid

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass
from pacer_common.domain.guid_health import DEFAULT_STATE_CODES, GuidState
from pacer_common.domain.limits import DEFAULTS, JitterDist, parse_quiet_hours
from pacer_common.settings import GatewayUrl, OpsSettings
from pacer_sender.domain.pacing import Limits

# Settings the sender cannot work with past a bound: (">" or ">=", the bound, what a value past
# it would do). Each is refused at start-up with that reason (``SenderSettings._at_least``).
_LEAST: dict[str, tuple[str, float, str]] = {
    "gateway_timeout_s": (">", 0, "0 is no timeout at all to the HTTP client, so a gateway that never answers would "
                                  "hold its guid's worker for ever, the guid's lease renewed all the while"),
    "lease_ttl_s": (">", 0, "a lease that ends as it is taken: every send would miss its send deadline (a quarter of "
                            "the lease) and no guid could be held"),
    "tenants_refresh_s": (">", 0, "the tenant table would be read from Postgres again and again without a pause"),
    "limits_refresh_s": (">", 0, "guid_limits would be read from Postgres again and again without a pause"),
    "retry_base_s": (">", 0, "a failed send would be retried at once, without any backoff"),
    "max_attempts": (">=", 1, "every item is tried at least once (1: never retried)"),
    "db_pool_max": (">=", 2, "the sender's pool keeps 2 connections open"),
}


class SenderSettings(OpsSettings):
    """``PACER_SENDER_*``. The pacing fields are the defaults of every guid's limits; their
    bounds and defaults come from ``pacer_common.domain.limits.Pacing``."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_SENDER_")
    port: int = Field(9102, description="Ops HTTP port.")
    group_id: str | None = Field(None, description=(
        "Kafka consumer group for `<prefix>.item-commands.{online,batch}`; unset: `<prefix>.sender`. All "
        "replicas must share it."
    ))
    owner: str = Field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}", validate_default=True,
                       description=(
        "The name in this sender's identity on item leases (`items.lease_owner`) and guid leases "
        "(`guid_leases.owner`). Each process start appends a random suffix (`<name>:<12 hex digits>`, in the "
        "`sender settings` log line), so owners are unique per process even when hostname and pid repeat (two "
        "pods on one node, pid 1 in every container, a restarted container). In Kubernetes the default name is "
        "the pod name plus the pid."
    ))
    gateway_url: GatewayUrl = Field(default="http://127.0.0.1:8080", validation_alias="PACER_GATEWAY_URL", description=(
        "Base URL of the WeCom HTTP gateway, with its scheme (`http://` or `https://`; the sender refuses to start "
        "without it); sends go to `POST /message/sendText`. The variable has no `SENDER_` "
        "part: `PACER_SENDER_GATEWAY_URL` is not read."
    ))
    gateway_timeout_s: float = Field(10.0, gt=0, description=(
        "Timeout of one gateway request, in seconds; the connect timeout is the smaller of this and 5 s. Must be "
        "at most `PACER_SENDER_LEASE_TTL_S / 4`, or the sender refuses to start."
    ))
    gateway_credential: SecretStr | None = Field(None, validation_alias="PACER_GATEWAY_CREDENTIAL", description=(
        "Bearer credential of the `default` tenant's gateway (`Authorization: Bearer …`), unless its row in "
        "`tenants` sets one. Other tenants' credentials live in `tenants` (Control API `/tenants`). A secret: "
        "never logged. No `SENDER_` part."
    ))
    tenants_refresh_s: float = Field(5.0, gt=0, description=(
        "How often the tenant table (gateway URLs, credentials) is re-read; a changed tenant is used within this."
    ))
    breaker_failures: int = Field(5, ge=1, description=(
        "Gateway failures in a row (unreachable, 5xx, timeout) that open a tenant's circuit breaker: its sends "
        "are then deferred before any request (outcome `deferred`, no attempt used, the guid not slowed) for "
        "`BREAKER_COOLDOWN_S`, then one probe goes. Per tenant: one tenant's failing gateway never slows another's sends."
    ))
    breaker_cooldown_s: float = Field(10.0, gt=0, description="How long an open tenant breaker refuses sends, in s.")
    lease_ttl_s: float = Field(60.0, gt=0, description=(
        "Lease length, in seconds, of a claimed item and of a guid lease. Guid leases are renewed every TTL/3. A "
        "claimed item is not sent if more than TTL/4 passed between the claim and the gateway call (the sender "
        "busy, the tenant's connection pool queueing); it is rescheduled instead (outcome `deadline_missed`), its "
        "attempt and its job's budget unit given back: Pacer's own lateness, not the item's."
    ))
    idle_lease_s: float = Field(60.0, gt=0, description=(
        "A guid whose worker has ended (nothing ready, nothing due soon) gives its guid lease back after this "
        "many seconds without new work, at the next renewal (so within TTL/3 after). Held leases are renewed "
        "every TTL/3, one row each: only guids with work cost that. A guid that gets work again takes its "
        "lease again (one batched statement), and its pacing carries on where it stopped."
    ))
    min_interval_ms: int = Field(round(DEFAULTS.min_interval_s * 1000), description="Least gap between two sends of one guid, in ms.")
    jitter_ms: int = Field(round(DEFAULTS.jitter_s * 1000), description=(
        "Random extra gap added to each interval, in ms (see `JITTER_DIST`). After a rate-limited answer, or a "
        "send left without one (in doubt), the interval is multiplied by `rate_limited_penalty` (2), again for "
        "each one in a row, up to `max_penalty` (×32); each clean send brings the multiplier back by "
        "`penalty_decay` (×0.9) toward 1; the guid's lease row keeps it (`guid_leases.penalty`), so a new owner "
        "resumes at it, worn down by the time since the guid's last send. All three are hot-adjustable limits "
        "(`pacer limits GUID --set max_penalty=64 --reason R`)."
    ))
    jitter_dist: JitterDist = Field(DEFAULTS.jitter_dist, description=(
        "Distribution of the random gap: uniform in [0, jitter), or exponential with mean jitter (capped at 4 × "
        "jitter)."
    ))
    online_reserve: float = Field(DEFAULTS.online_reserve, description=(
        "Share of each account's rate kept for online traffic (takeover prompts, auto-replies). Batch sends are "
        "spaced `min_interval / (1 − reserve)` apart and get `(1 − reserve)` of each window cap."
    ))
    reserve_from_priority: int = Field(DEFAULTS.reserve_from_priority, ge=2, le=10, description=(
        "Batch work of this priority number or above (campaigns: 3) is spaced by the online reserve; more urgent "
        "batch work (ticket notifications: 2) is spaced at the account's whole rate — still after online work, "
        "and within the batch share of each window cap. 10: the reserve binds no batch work's spacing."
    ))
    per_minute: int | None = Field(None, description=(
        "Sends per guid per UTC minute (both lanes together; batch capped at its share). A full window "
        "defers sends to the next window; a deferral is not an attempt."
    ))
    per_hour: int | None = Field(None, description=(
        "Sends per guid per UTC hour, as `PER_MINUTE` (in a zone half an hour off UTC, from half past to half past)."))
    per_day: int | None = Field(None, description=(
        "Sends per guid per calendar day in the guid's time zone (`TIMEZONE`, or its `timezone` override), as "
        "`PER_MINUTE`: the count starts again at the guid's midnight."))
    quiet_hours: str | None = Field(default=None, description=(
        "Local time span in which batch sends wait (may wrap midnight); online sends still go. The console, "
        "`GET /guids` and the stall count read it, with the sender's other limits, for the guids this sender "
        "holds (the sender writes them to `sender_limits`); a guid's own overrides and every guid's `*` count "
        "over them."
    ))
    timezone: str = Field(DEFAULTS.timezone, description=(
        "Time zone (IANA name) of quiet hours and of the day of `PER_DAY`, for guids whose limits overrides name "
        "none; the database's session setting `pacer.timezone`, from which it counts those guids' days. The "
        "sender refuses to start with a name the database does not know, or when a connection pooler drops "
        "the setting."))
    limits_refresh_s: float = Field(1.0, gt=0, description=(
        "How often the sender reads `guid_limits` for hot changes (`pacer limits GUID --set …`)."
    ))
    max_attempts: int = Field(5, ge=1, description=(
        "Attempts for retryable and not-sent failures; after the last the item is `failed`. A rate-limited answer"
        " is not an attempt: the item waits (`waiting_retry`, reason `rate_limited`, at least the backoff below "
        "and any retry-after) as often as it takes, until its `expire_at`. Nor is a send Pacer deferred itself "
        "before any request (a tenant's breaker open, its quota used up, the send deadline passed: "
        "`deadline_missed`)."
    ))
    retry_base_s: float = Field(1.0, gt=0, description=(
        "Retry backoff base, in seconds. The delay before attempt n+1 is drawn uniformly from [c/2, c], with c = "
        "min(300 s, base × 2^(n−1))."
    ))
    max_buffered: int = Field(100_000, gt=0, description=(
        "Batch commands held in memory by all guids' windows together (about 2.5 KiB each), refills under way "
        "included. Past it a batch command only rings its guid (the item is read from Postgres when the guid "
        "gets to it); once it is reached, a guid's window reads only when empty, its share of this budget "
        "(this over the guids with windows, at least one item), so the windows hold at most about twice it. "
        "Below about ten per guid, reads cost a sender more CPU per send than the sends do. Online commands "
        "are always held, up to a window each."
    ))
    guid_buffer: int = Field(default=50, ge=2, description=(
        "A guid's in-memory window, per lane (at least 2): ready commands held so most sends need no read. Past "
        "it a command only rings, and the guid reads its next ready items from Postgres (up to the window) when "
        "the window is down to half. One guid's backlog costs no more than `PACER_SENDER_GUID_BUFFER_MAX`, "
        "whatever its size."
    ))
    guid_buffer_max: int = Field(default=400, ge=2, description=(
        "How far a guid's window grows while its backlog is deep: each refill that Postgres answers in full "
        "doubles the window, up to this (never below `PACER_SENDER_GUID_BUFFER`), and one answered short brings "
        "it back. A refill costs the sender and Postgres about the same whatever it reads, so a guid sending "
        "thousands of items reads eight times less often at 400 than at 50. A window grows no further than its "
        "share of `PACER_SENDER_MAX_BUFFERED` (that over the guids with windows), so many deep guids keep the "
        "first size. A new job, a better priority or scheduled work come due drops the batch "
        "lane and reads the guid's head again, whatever the window's size."
    ))
    sweep_s: float = Field(default=20.0, gt=0, description=(
        "How often (and at every partition assignment) the sender looks in Postgres for guids with claimable work"
        " that it owns and runs no worker for — work whose commands were deleted, skipped, lost, or handled by a "
        "sender that died — and starts them. A guid whose next scheduled item is more than two sweeps away has no"
        " worker until a sweep brings it back."
    ))
    item_error_attempts: int = Field(default=3, ge=1, description=(
        "Attempts of an item whose execution raises an unexpected exception (a bug), with backoff (1 s, "
        "doubling); after the last the item fails with `bad_params` and `internal error: …` — only if it is still"
        " pending (a submitted item is verified by the reconciler). Database outages are retried without limit "
        "and never count."
    ))
    failure_codes: dict[int, FailureClass] = Field(default_factory=lambda: dict(DEFAULT_CODE_TABLE), description=(
        "Maps gateway response codes to failure classes. When set it replaces the built-in table (no merge). "
        "Classes: `retryable`, `rate_limited`, `needs_human`, `bad_params`, `expired`, `in_doubt`, `not_sent`. "
        "Built-in: "
        '`{"-1":"retryable","1001":"needs_human","1002":"needs_human","1003":"needs_human","40001":"bad_params",'
        '"45009":"rate_limited"}`.'
        " Codes missing from the table are `retryable`."
    ))
    guid_state_codes: dict[int, GuidState] = Field(default_factory=lambda: dict(DEFAULT_STATE_CODES), description=(
        "Which guid lifecycle state a `needs_human` answer's code means (the failure-code table decides that it "
        "is `needs_human`): the guid takes that state (source `send_failure`) and its queue is held until it is "
        "`online` again. When set it replaces the built-in table. Built-in: "
        '`{"1001":"offline","1002":"kicked","1003":"unauthorized"}`; a `needs_human` code missing from it means '
        "`offline`."
    ))
    media_poll_after_s: float = Field(30.0, gt=0, description=(
        "A media (image, file, video) uploaded but not yet ready: if no `media.ready` callback made it ready "
        "within this many seconds of the upload, the sender asks the gateway (`/media/status`)."
    ))
    media_poll_every_s: float = Field(10.0, gt=0, description=(
        "After the first `/media/status` poll, at most one poll per media this often; also the wait before "
        "an upload that did not go through (timeout, 5xx) is tried again."
    ))
    media_recheck_s: float = Field(2.0, gt=0, description=(
        "How often an item waiting for its media looks at the media's row again (a callback may have made it "
        "ready). The item waits pending, with the reason, and still expires at its `expire_at`."
    ))
    media_reuse_s: float = Field(172_800.0, gt=0, description=(
        "How long one upload of a media serves a guid's later items of the same url. After it the next item "
        "uploads the media again (a new `mediaId`): WeCom keeps temporary media three days, so the default, two "
        "days, never sends into an expired one (keep it below the gateway's own expiry). A failed upload is "
        "tried again after it too. Longer than `PACER_SENDER_MEDIA_POLL_AFTER_S`."
    ))
    db_pool_max: int = Field(20, ge=2, description="Most Postgres connections of one sender (the pool keeps at least 2).")
    step_linger_ms: float = Field(10.0, ge=0, le=1000, description=(
        "How long a durable step (the claim and `submitted` before a send, the confirmation after it) waits for "
        "other guids' steps to go with it as one statement. At a human pace few steps are asked at once, and each "
        "statement's fixed cost is shared by the steps that arrive meanwhile. A paced send's claim goes ahead of "
        "its gap's end (`PACER_SENDER_CLAIM_AHEAD_MS`), so its wait is hidden; a send with no gap to wait out "
        "waits at most this long more. "
        "0: a step goes on the next turn of the event loop with whatever was asked in the same instant."
    ))
    step_linger_spare_ms: float = Field(50.0, ge=0, le=1000, description=(
        "Most a confirmation waits for other guids' steps when its guid cannot send again before that anyway: up "
        "to the guid's least interval between sends (`PACER_SENDER_MIN_INTERVAL_MS`, or the guid's hot limit) "
        "less the claim's lead. At a human pace a statement's fixed cost is then shared by more items, and no "
        "send waits for it. A guid that may send again sooner waits `PACER_SENDER_STEP_LINGER_MS`, as flat out, "
        "and so does every confirmation when this is no longer than that. At most a quarter of the send deadline."
    ))
    claim_ahead_ms: float = Field(100.0, ge=0, le=1000, description=(
        "Most a guid's next item is claimed before its pacing gap ends, so that its gateway call starts as the gap "
        "ends instead of a claim's write later (which, at one send a second, costs several per cent of the rate). "
        "The lead used is the claims' recent duration (`pacer_sender_send_delay_seconds` shows what is left), up to "
        "this; the call never starts before the gap ends. A batch item claimed ahead gives its turn up to an online "
        "item that arrives within the lead (outcome `yielded`: not sent, it goes round again). 0: every item is "
        "claimed once its gap is over. At most a quarter of the send deadline."
    ))
    shed: bool = Field(DEFAULTS.shed, description=(
        "Default for every guid (per guid: the hot limit `shed`): batch items that cannot go out before their "
        "`expire_at` at the guid's current rate are expired early, error class `shed` (docs/architecture.md, "
        "\"A guid's queue\"). `false`: they wait and expire when they reach the front."
    ))
    online_yield_s: float = Field(DEFAULTS.online_yield_s, ge=0, description=(
        "Default for every guid (per guid: the hot limit `online_yield_s`): while an online command of the guid "
        "has waited longer than this, its batch lane sends nothing."
    ))
    first_send_spread: float = Field(1.0, ge=0, le=1, description=(
        "When batch work reaches a rested guid (no batch send within its batch interval, a previous owner's "
        "sends included: the sender starting, a partition moving to it, a campaign starting or resuming on guids "
        "it holds), the guid's first campaign send waits a random part, up to this fraction, of one batch "
        "interval. Guids that get work together then start spread over the interval instead of in one burst "
        "that comes round every interval (docs/performance.md, \"A burst that comes round\"). A guid handed over "
        "with its previous owner's last send known waits a random part of how long it has been overdue instead "
        "(at most one interval). Online and urgent work are not held. `0`: every rested guid sends at once."
    ))
    shed_every_s: float = Field(30.0, gt=0, description=(
        "How often a guid with batch work beyond its window checks its batch queue for items to shed (one read "
        "of the guid's whole batch queue in Postgres)."
    ))

    @field_validator("owner")
    @classmethod
    def _unique_owner(cls, name: str) -> str:
        return f"{name}:{uuid.uuid4().hex[:12]}"

    @field_validator(*_LEAST, mode="before")
    @classmethod
    def _at_least(cls, value: object, info: ValidationInfo) -> object:
        """Refuse a value past its field's bound (``_LEAST``), naming the variable and saying
        what the value would do. The field's own bound (``gt``/``ge``) stays, for the docs."""
        name = info.field_name
        assert name is not None
        op, bound, why = _LEAST[name]
        try:
            number = float(value)  # type: ignore[arg-type]  # a string or a number; anything else: pydantic's error
        except (TypeError, ValueError):
            return value
        if number <= bound if op == ">" else number < bound:
            least = f"greater than {bound:g}" if op == ">" else f"at least {bound:g}"
            raise ValueError(f"PACER_SENDER_{name.upper()} must be {least}, not {value}: {why}")
        return value
        if number < least or (least == 0 and number == 0):
            bound = "greater than 0" if least == 0 else f"at least {least:g}"
            raise ValueError(f"PACER_SENDER_{name.upper()} must be {bound}, not {value}: {why}")
        return value

    def limits(self) -> Limits:
        """The default limits of every guid (the fields, their bounds and defaults: ``Pacing``)."""
        return Limits(min_interval_s=self.min_interval_ms / 1000, jitter_s=self.jitter_ms / 1000,
                      jitter_dist=self.jitter_dist, online_reserve=self.online_reserve,
                      reserve_from_priority=self.reserve_from_priority, per_minute=self.per_minute,
                      per_hour=self.per_hour, per_day=self.per_day,
                      quiet_hours=parse_quiet_hours(self.quiet_hours) if self.quiet_hours else None,
                      timezone=self.timezone, shed=self.shed, online_yield_s=self.online_yield_s)

    @property
    def send_deadline_s(self) -> float:
        """How long after its claim a send may still be written (a quarter of the lease)."""
        return self.lease_ttl_s / 4

    @property
    def in_flight_s(self) -> float:
        """How long after its claim a send may still be on its way to the gateway: written by the
        send deadline, answered or abandoned within the gateway timeout after that."""
        return self.send_deadline_s + self.gateway_timeout_s

    @model_validator(mode="after")
    def _lease_covers_a_send(self) -> SenderSettings:
        self.limits()  # refuse bad pacing settings at start-up
        # A claim must outlive the longest send it covers (the send deadline is a quarter of
        # the lease, the gateway timeout at most a quarter more), so item leases need no renewal.
        if self.gateway_timeout_s > self.lease_ttl_s / 4:
            raise ValueError(
                f"PACER_SENDER_GATEWAY_TIMEOUT_S ({self.gateway_timeout_s}) must be at most a quarter of "
                f"PACER_SENDER_LEASE_TTL_S ({self.lease_ttl_s})")
        if self.claim_ahead_ms / 1000 > self.send_deadline_s / 4:
            raise ValueError(
                f"PACER_SENDER_CLAIM_AHEAD_MS ({self.claim_ahead_ms}) must be at most a quarter of the send deadline "
                f"({self.send_deadline_s * 1000:.0f} ms, a quarter of PACER_SENDER_LEASE_TTL_S)")
        if self.media_reuse_s <= self.media_poll_after_s:
            raise ValueError(
                f"PACER_SENDER_MEDIA_REUSE_S ({self.media_reuse_s}) must be longer than PACER_SENDER_MEDIA_POLL_AFTER_S "
                f"({self.media_poll_after_s}): a media still pending would be uploaded again before it is ever polled")
        if self.step_linger_spare_ms / 1000 > self.send_deadline_s / 4:
            raise ValueError(
                f"PACER_SENDER_STEP_LINGER_SPARE_MS ({self.step_linger_spare_ms}) must be at most a quarter of the send "
                f"deadline ({self.send_deadline_s * 1000:.0f} ms, a quarter of PACER_SENDER_LEASE_TTL_S)")
        return self
