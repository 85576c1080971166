"""Request and response bodies of the Control API (published in its OpenAPI document)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    field_validator,
    model_validator,
)

from pacer_common.domain.requests import TENANT_NAME
from pacer_common.domain.status import ItemStatus
from pacer_common.domain.tokens import Role
from pacer_control.domain.filters import MAX_RETRY, check_retry_status

# Postgres text cannot hold NUL; refusing it here gives a 422 instead of a database error.
NO_NUL = r"^[^\x00]*$"
Text = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=NO_NUL)]
Reason = Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=NO_NUL)]
TokenName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")]
MAX_INT4 = 2_147_483_647
TenantName = Annotated[str, StringConstraints(pattern=TENANT_NAME)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class Problem(BaseModel):
    """Every error: one sentence saying what is wrong and, where it helps, what to do."""

    detail: str


# -- inputs -------------------------------------------------------------------------------
class ActionBody(_In):
    reason: Reason | None = None


class RetryItemBody(ActionBody):
    priority: Annotated[int, Field(ge=0, le=32767, description="the compensation's priority (lower runs first); "
                                                               "default: the item's own")] | None = None


class PauseGuidBody(_In):
    reason: Reason


class ReasonBody(_In):
    """An action that needs to say why: rejecting a job, forcing a lease free."""

    reason: Reason


class ReleaseBody(ReasonBody):
    """A forced release. ``expected_owner`` / ``expected_epoch``: the holder the caller saw and
    means to evict (the console always sends both); if the lease is held by another holder or
    under another epoch by then, nothing is released (409, naming the holder now). Left out:
    whoever holds the lease then is evicted."""

    expected_owner: Text | None = Field(None, description=(
        "the lease holder you mean to evict (its `owner` / `lease_owner`); another holder now: 409"))
    expected_epoch: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = Field(None, description=(
        "the lease's epoch (`epoch` / `lease_epoch`) you saw; another epoch now (the lease changed hands): 409"))


class BudgetBody(_In):
    max_sends: Annotated[int, Field(gt=0, le=MAX_INT4)]


AtMost = Annotated[int | None, Field(None, ge=1, le=MAX_RETRY, description=(
    f"take the selection in parts: act on at most this many matching items, by item id, and answer `next_after`; "
    f"call again with `after` set to it until `more` is false. Left out, a selection over {MAX_RETRY} items is "
    f"refused"))]
After = Annotated[uuid.UUID | None, Field(None, description=(
    "with `at_most`: the part starts after this item id (the previous answer's `next_after`)"))]


class RetryFilterBody(_In):
    status: Literal["failed", "expired", "abandoned"] = Field("failed", description=(
        "items known not to be delivered; `unverified` ones are resolved instead (POST /items/{id}/resolve)"))
    error_class: Text | None = None
    guid: Text | None = None
    at_most: AtMost = None
    after: After = None

    @field_validator("status", mode="before")
    @classmethod
    def _not_unverified(cls, value: Any) -> Any:
        # said here, not as "should be 'failed', 'expired' or 'abandoned'": where they are decided
        if value == ItemStatus.UNVERIFIED.value and (why := check_retry_status(ItemStatus.UNVERIFIED)):
            raise ValueError(why)
        return value


class RetryBody(_In):
    """Either ``item_ids`` or ``filter``; at most 10000 items either way."""

    item_ids: Annotated[list[uuid.UUID], Field(min_length=1, max_length=MAX_RETRY)] | None = None
    filter: RetryFilterBody | None = None
    reason: Reason | None = None

    @model_validator(mode="after")
    def _one_selection(self) -> RetryBody:
        if (self.item_ids is None) == (self.filter is None):
            raise ValueError("give either 'item_ids' or 'filter' (not both, not neither)")
        return self


class ResolveBody(_In):
    delivered: bool = Field(description="true: the message did reach the recipient; false: it did not")
    reason: Reason


class CancelItemsBody(_In):
    guid: Text | None = None
    reason: Reason | None = None
    at_most: AtMost = None
    after: After = None


class TokenBody(_In):
    name: TokenName
    role: Role
    tenants: Annotated[list[TenantName], Field(min_length=1, max_length=100)] | None = Field(None, description=(
        "scope the token to these tenants: it sees and changes only their jobs and items, and nothing that spans "
        "tenants (guids, locks, audit, tokens); left out: every tenant"))


GatewayUrl = Annotated[str, StringConstraints(min_length=1, max_length=2048, pattern=r"^https?://[^\s\x00]+$")]
def _no_nul(value: SecretStr) -> SecretStr:
    if "\x00" in value.get_secret_value():
        raise ValueError("must not contain NUL characters")
    return value


Secret = Annotated[SecretStr, Field(min_length=1, max_length=4096), AfterValidator(_no_nul)]
Quota = Annotated[int, Field(gt=0, le=MAX_INT4)]
ZoneName = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=NO_NUL)]  # checked by the database


class TenantChange(_In):
    """Fields to set; a field left out is unchanged, ``null`` clears it. Secrets are write-only."""

    base_url: GatewayUrl | None = Field(None, description="the tenant's gateway, e.g. https://gw.example/api")
    credential: Secret | None = Field(None, description="sent as `Authorization: Bearer …`; never shown again")
    callback_secret: Secret | None = Field(None, description="signs its callbacks (HMAC-SHA256); never shown again")
    sends_per_day: Quota | None = Field(None, description=(
        "sends a day over all its guids (a soft limit: senders may pass it by about a second's sends); past it, "
        "its sends wait for its next day"))
    max_guids: Quota | None = Field(None, description="guids the tenant may hold; a job past it is dead-lettered")
    timezone: ZoneName | None = Field(None, description=(
        "the IANA time zone whose calendar day `sends_per_day` counts, e.g. Asia/Shanghai; null: each sender's "
        "`PACER_SENDER_TIMEZONE`"))


class TenantBody(TenantChange):
    name: TenantName


class TestSendBody(_In):
    guid: Text
    to_id: Text
    content: Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=NO_NUL)]


# -- outputs ------------------------------------------------------------------------------
class ActionResponse(_Out):
    outcome: Literal["done", "noop"]
    changed: bool
    message: str
    status: str | None = None


class JobSummary(BaseModel):
    job_id: str
    request_id: str
    kind: str
    priority: int
    status: str
    paused_reason: str | None
    target_mode: str
    created_by: str
    created_at: datetime
    total: int
    counts: dict[str, int]
    tenant: str = Field("default", description="the tenant whose gateway sends the job")


class JobPage(BaseModel):
    jobs: list[JobSummary]
    next_before: str | None = Field(description="pass as ?before= for the next (older) page; null at the end")


class ShardView(BaseModel):
    shard_id: int
    guid: str
    sub: int
    status: str
    paused_reason: str | None
    paused_by: str | None
    total: int
    last_progress_at: datetime | None
    counts: dict[str, int]
    stalled: bool = Field(False, description=(
        "open items and no progress for longer than its guid's limits explain (quiet hours, a send window's cap, "
        "the guid's pace, stretched by its rate-limit penalty, or the job's) by over "
        "`PACER_CONTROL_STALLED_AFTER_S`: a guid stuck (see its locks)"))
    guid_state: str | None = Field(None, description=(
        "its guid's lifecycle state when not `online` (`offline`, `kicked`, `unauthorized`): the guid sends "
        "nothing, so the shard waits for it, not stalled; null while online"))
    guid_paused_reason: str | None = Field(None, description=(
        "why an operator paused its guid (`POST /guids/{guid}/pause`), while paused: the shard waits for it"))


class FailureCategory(BaseModel):
    error_class: str
    total: int
    by_status: dict[str, int]


class Budget(BaseModel):
    max_sends: int | None
    used: int


class JobDetail(BaseModel):
    job_id: str
    request_id: str
    kind: str
    priority: int
    status: str
    paused_reason: str | None
    paused_by: str | None
    paused_at: datetime | None
    target_mode: str
    created_by: str
    created_at: datetime
    dispatched_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    expire_at: datetime | None
    not_before: datetime | None
    total: int
    tenant: str = Field("default", description="the tenant whose gateway sends the job")
    budget: Budget
    counts: dict[str, int] = Field(description="items per status, summed over every shard of the job")
    counts_read_at: datetime = Field(description=(
        "when `counts`, `shard_statuses` and `shards_total` were read: a job whose counts take long to read (tens "
        "of thousands of shards) has them kept a while (`PACER_CONTROL_COUNTS_SHARE`); the rest is read afresh"))
    shard_statuses: dict[str, int] = Field(description="the job's shards per status, every one of them")
    shards_total: int = Field(description="how many shards the job has")
    shards: list[ShardView] = Field(description="every shard by guid, or the page `shards_limit` asked for")
    next_shards_after: int | None = Field(
        None, description="with `shards_limit`: the last shard of a full page, to pass as `shards_after` for the "
                          "next (which may be empty); null when the page is not full: it holds the last shard")
    failures: list[FailureCategory] = Field(
        description="last error class of failed, abandoned, expired and waiting_retry items (none asked for with "
                    "`failures=false`)")
    shed: int = Field(0, description="items expired early (error class shed): they could not go out before "
                                     "their expire_at at their guid's rate")


class ItemView(BaseModel):
    item_id: str
    shard_id: int
    guid: str
    to_id: str
    status: str
    attempts: int
    priority: int
    held: bool
    compensates: str | None
    last_error_class: str | None
    last_error: str | None
    next_attempt_at: datetime | None
    expire_at: datetime | None
    created_at: datetime
    updated_at: datetime
    waiting: str | None = Field(None, description="why an open item is not moving: 'waiting: job paused: …', "
                                                  "a retry not yet due, a verification; null when it is not waiting")


class ItemPage(BaseModel):
    items: list[ItemView]
    next_after: str | None = Field(description="pass as ?after= for the next page; null at the end")


class RetryOutcome(BaseModel):
    item_id: str
    outcome: str
    new_item: str | None
    message: str


class RetryResponse(BaseModel):
    totals: dict[str, int]
    results: list[RetryOutcome]
    more: bool = Field(description="a filter's part (`at_most`) left matching items: call again with `after`")
    next_after: str | None = Field(None, description="the next part's `after`: the last item id this part took")


class GuidBacklog(BaseModel):
    """A guid's unfinished items by lane and state (ready, scheduled, held, waiting_retry,
    claimed, submitted, recovery_pending), its queue (ready + scheduled), how long its oldest
    ready item has waited, and the time to drain its queue at its send rate this hour."""

    by_lane: dict[str, dict[str, int]]
    queued: int
    oldest_wait_s: float
    drain_s: float | None
    sends_per_s: float | None
    ready: int = Field(description="items ready to send now (the `ready` states of both lanes)")
    oldest_ready: datetime | None = Field(description="when the first ready item became ready")


class BacklogRow(BaseModel):
    guid: str
    online_ready: int
    batch_ready: int
    scheduled: int
    queued: int
    oldest_wait_s: float
    drain_s: float | None


class BacklogPage(BaseModel):
    guids: list[BacklogRow]


class GuidView(BaseModel):
    """Health for every role; the lease fields and limit overrides only for tech_admin and up."""

    guid: str
    paused: bool
    paused_reason: str | None
    paused_by: str | None
    paused_at: datetime | None
    state: Literal["online", "offline", "kicked", "unauthorized"] = Field(default="online", description=(
        "lifecycle state, from device.status callbacks, send failures and operators; any but online holds the "
        "guid's queue until it is online again (a guid never heard of is online)"))
    state_since: datetime | None = None
    state_source: Literal["callback", "send_failure", "operator"] | None = None
    state_reason: str | None = None
    held: bool = Field(default=False, description="the guid sends nothing: paused, or its state is not online")
    queued: int | None = Field(default=None, description="items queued for this guid (pending, waiting_retry)")
    oldest_waiting: datetime | None = Field(default=None, description="when the oldest queued item was created")
    ready: int | None = Field(default=None, description=(
        "in the list, of the queued, those ready to send now: pending, not held, due, their job running and "
        "their shard not paused"))
    oldest_ready: datetime | None = Field(default=None, description="in the list, when the first ready item became ready")
    activity: Literal["sending", "slowed", "waiting", "quiet", "capped", "stalled", "idle"] | None = Field(
        default=None, description=(
            "what the guid is doing unless held: `idle` (nothing queued), `waiting` (items queued, none ready "
            "now: their jobs or shards paused, or scheduled later), `quiet` (items ready, inside the guid's quiet "
            "hours: batch sends wait until `quiet_until`; replies to a customer still go out), `capped` (items "
            "ready, a minute, hour or day window has used its batch share of the guid's cap: batch sends wait "
            "until `capped_until`), `stalled` (an item ready and no send for `PACER_CONTROL_STALLED_AFTER_S`, 2 "
            "minutes by default, beyond the guid's own longest gap between sends, or its ready items' jobs' "
            "shortest interval per guid when longer, stretched by its rate-limit `applied_penalty`, counted from the end "
            "of its last hold or of `gateway_quiet_until`: a guid stuck), `slowed` (sending at `applied_penalty` times its "
            "interval, or keeping the quiet its gateway asked for until `gateway_quiet_until`: the gateway "
            "rate-limited it lately, or left a send unanswered), else `sending`. Pacing as the sender holding the "
            "guid applies it: its own overrides over every guid's `*` over that sender's settings"))
    quiet_until: datetime | None = Field(default=None, description=(
        "when the guid's quiet hours end, while it is inside them (from its limits, as `activity` reads them)"))
    penalty: float | None = Field(default=None, description=(
        "the guid's rate-limit penalty: how many times its configured interval it is paced at since the gateway "
        "rate-limited it (or left a send unanswered), as the sender holding it last wrote it (once per lease "
        "renewal); each clean send brings it back toward 1 by `penalty_decay`; none once it is back. The row "
        "keeps it when its holder is gone, for the next owner: `applied_penalty` is what it is paced at now"))
    applied_penalty: float | None = Field(default=None, description=(
        "the rate-limit penalty the guid is paced at now: `penalty` while a live sender holds the guid, none "
        "while nobody does (or when it is back to its own pace)"))
    gateway_quiet_until: datetime | None = Field(default=None, description=(
        "while it lasts, when the quiet ends that the gateway asked of the guid with a rate limit (its "
        "`Retry-After`, at most an hour): no call of the guid, online or batch, goes before it, from whichever "
        "sender holds the guid (the lease row keeps it across a takeover or a rebalance)"))
    capped_until: datetime | None = Field(default=None, description=(
        "when the guid's send window ends, while one has used its batch share of the cap (from its limits, as "
        "`activity` reads them, and its sends)"))
    owner: str | None = None
    epoch: int | None = None
    since: datetime | None = None
    lease_until: datetime | None = None
    renew_count: int | None = None
    takeovers: int | None = None
    last_send_at: datetime | None = None
    expired: bool | None = None
    limits: dict[str, Any] | None = None
    backlog: GuidBacklog | None = Field(default=None, description="one guid's view only: its queue by lane and "
                                        "state, oldest wait and time to drain")


class GuidStateChange(BaseModel):
    id: int
    state: Literal["online", "offline", "kicked", "unauthorized"]
    previous: Literal["online", "offline", "kicked", "unauthorized"] | None
    at: datetime = Field(description="when Pacer applied the change")
    event_ts: datetime = Field(description="the moment the event describes (the callback's ts, a failure's time)")
    source: Literal["callback", "send_failure", "operator"]
    reason: str | None


class GuidHistory(BaseModel):
    guid: str
    changes: list[GuidStateChange]
    next_before: int | None = Field(description="pass as ?before= for older changes; null at the end")


class GuidPage(BaseModel):
    guids: list[GuidView]
    next_after: str | None


class LimitsResponse(BaseModel):
    guid: str
    limits: dict[str, Any] = Field(description="the guid's overrides after the change")
    changed: dict[str, Any]
    message: str


class LockView(BaseModel):
    guid_leases: list[dict[str, Any]]
    item_leases: list[dict[str, Any]]
    counts: dict[str, int]


class Sample(BaseModel):
    guid: str
    to_id: str
    content: str


class DryRunResponse(BaseModel):
    request_id: str
    kind: str
    priority: int
    lane: str
    items: int | None = Field(description="null when the audience is fetched at planning time (requery)")
    shards: dict[str, int] = Field(description="items per guid (one shard each)")
    samples: list[Sample]
    template_fields: list[str]
    budget_max_sends: int | None
    warnings: list[str]


class TestSendResponse(_Out):
    queued: bool
    job_id: str
    item_id: str
    idem_key: str
    message: str


class AuditView(BaseModel):
    id: int
    at: datetime
    actor: str
    action: str
    target_type: str
    target_id: str
    reason: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    position: str = Field(description=(
        "where a tail from this entry starts (`<xid>.<id>`): pass as ?after= for what was committed after it. "
        "While a transaction older than the entry is still open, the listing gives that transaction's "
        "position instead, so the tail passes nothing (the entry may come again)"))


class AuditPage(BaseModel):
    entries: list[AuditView]
    next_after: str | None = Field(None, description="the tail's position: pass as ?after= for what was "
                                                     "committed since; the same position when nothing was")
    next_before: int | None = None


class TokenView(BaseModel):
    name: str
    role: Role
    tenants: list[str] | None = None
    created_by: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class TenantView(BaseModel):
    """A tenant without its secrets: whether each is set, never its value."""

    name: str
    base_url: str | None
    has_credential: bool
    has_callback_secret: bool
    sends_per_day: int | None
    max_guids: int | None
    timezone: str | None = Field(None, description="whose calendar day `sends_per_day` counts; null: the senders'")
    sends_today: int = Field(0, description="sends so far on the tenant's today, the day `sends_per_day` counts")
    guids: int
    created_at: datetime
    updated_at: datetime


class CreatedToken(BaseModel):
    name: str
    role: Role
    tenants: list[str] | None = None
    token: str = Field(description="the secret; shown only in this response, never again")
    created_at: datetime
    message: str


class InDoubtItem(_Out):
    item_id: str
    job_id: str
    request_id: str
    job_status: str = Field(description="its job's status: resolved as not delivered, an item of a cancelled job is "
                                        "abandoned, not sent")
    expire_at: datetime | None = Field(description="resolved as not delivered past it, the item expires unsent")
    guid: str
    to_id: str
    idem_key: str
    ledger_state: str | None
    last_error: str | None
    events: list[dict[str, Any]]


class InDoubtPage(BaseModel):
    items: list[InDoubtItem]


class CancelItemsResponse(BaseModel):
    totals: dict[str, int]
    more: bool = Field(description="the part (`at_most`) left matching items: call again with `after`")
    next_after: str | None = Field(None, description="the next part's `after`: the last item id this part took")


class ApprovalSample(BaseModel):
    guid: str
    to_id: str
    content: str


class GuidProjection(BaseModel):
    guid: str
    items: int
    interval_s: float = Field(description="mean seconds between two of its sends by its interval and jitter")
    caps: str | None = Field(description="its window caps' batch share, e.g. `1,600/day`")
    seconds: float | None = Field(description="how long it takes by its limits; null: never (a cap leaves no batch share)")


class Projection(BaseModel):
    items: int = Field(description="items still to be sent (pending or waiting_retry)")
    expired: int = Field(0, description=(
        "items that expired unsent (past their expire_at) while the job waited; not in `items`"))
    seconds: float | None = Field(description="projected duration at current limits (the slowest guid); null: never")
    slowest_guid: str | None
    guids: list[GuidProjection]


class ApprovalView(JobSummary):
    samples: list[ApprovalSample]
    projection: Projection


class ApprovalPage(BaseModel):
    jobs: list[ApprovalView] = Field(description="the oldest waiting, at most 50, oldest first")
    waiting: int = Field(description="how many jobs await approval in all")


# -- dead letters -------------------------------------------------------------------------
class DeadLetterView(BaseModel):
    """A refused job request (queue ``requests``, refused by the planner) or callback
    (``callbacks``, refused by the callback intake), where it is on its DLQ topic and why."""

    queue: Literal["requests", "callbacks"]
    topic: str
    partition: int
    offset: int
    at: datetime = Field(description="when it was dead-lettered (the record's timestamp)")
    source: str = Field(description="the service that refused it: `planner` or `intake`")
    tenant: str | None = Field(description="the tenant it names; null if that cannot be told")
    key: str | None = Field(description="the record's key: a job request's id as its publisher keyed it")
    bytes: int = Field(description="the size of the original record")
    reason: str


class DeadLetterPage(BaseModel):
    queue: Literal["requests", "callbacks"]
    topic: str
    letters: list[DeadLetterView] = Field(description="newest first")
    older: str | None = Field(description="the next page, of older records: pass it as `older` (with the same "
                                          "`queue`, `last` and filters); null when the topic holds nothing older")


class DeadLetterDetail(DeadLetterView):
    headers: dict[str, str]
    body: str = Field(description="the original bytes as UTF-8 (invalid bytes replaced), cut at 65,536 characters; "
                                  "the exact bytes: `GET …/body`")
    body_truncated: bool
