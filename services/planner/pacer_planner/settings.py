"""The planner's settings (``PACER_PLANNER_*``), read in ``main()``."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from pacer_common.settings import OpsSettings
from pacer_planner.domain.sharding import DEFAULT_MAX_SHARD_ITEMS
from pacer_planner.domain.targets import MAX_PAGE_BYTES


class PlannerSettings(OpsSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_PLANNER_")
    port: int = Field(9101, description="Ops HTTP port.")
    group_id: str | None = Field(None, description=(
        "Kafka consumer group for `<prefix>.job-requests`; unset: `<prefix>.planner`."
    ))
    max_backlog_per_guid: int = Field(100_000, description=(
        "Admission control: a request that would take any guid past this many queued items (pending or waiting "
        "to retry) is refused whole, to the DLQ, with the reason. Takeover prompts and auto-replies in the online "
        "lane (priority 0 or 1, as they have by default) are always admitted; anything else is bounded: another "
        "kind whatever `priority` it asks for (a campaign at priority 0 or 1 too), and a takeover prompt or an "
        "auto-reply asking for a batch priority (2-9). A requery page that would do so waits instead (see "
        "`REQUERY_ADMISSION_WAIT_S`); a guid with nothing queued never holds a page back."
    ))
    coalesce_window_s: float = Field(3.0, description=(
        "Ticket notifications (`ticket_notify`) wait this long before they may be sent, so that a newer "
        "`status_version` of the same `business_id` of the same tenant arriving meanwhile supersedes them "
        "(another tenant's never does): A → B → C inside the window sends only C. An older version arriving "
        "after a newer one is superseded at once. `0` sends at once (still superseding what has not been sent). "
        "One whose `expire_at` falls within the window does not wait: held, it could only expire."
    ))
    max_shard_items: int = Field(DEFAULT_MAX_SHARD_ITEMS, ge=1, description=(
        "A guid with more items than this in one job is split into `ceil(n / max)` sub-shards by `crc32(to_id) % "
        "subs`. For requery jobs the count is fixed from the guid's targets on the page where it first appears."
    ))
    requery_max_jobs: int = Field(4, ge=1, description=(
        "Requery jobs one planner pages at once (one background task each); more wait for a later sweep."
    ))
    requery_sweep_s: float = Field(5.0, gt=0, description=(
        "How often a planner looks for requery jobs that need paging: beyond the cap, taken over from a dead "
        "planner, resumed after a pause."
    ))
    requery_timeout_s: float = Field(10.0, gt=0, description=(
        "Deadline of one page request to the audience service: the whole answer, headers and body, must arrive "
        "within it (an answer still trickling in is cut off, a failed attempt), and so must each connect and read."
    ))
    requery_max_page_bytes: int = Field(MAX_PAGE_BYTES, ge=1024, description=(
        "Most bytes one page's body may have (after any content encoding is undone): a larger answer is refused "
        "as it streams in, a failed attempt, before it is parsed. Each of the `REQUERY_MAX_JOBS` pagers may hold "
        "one such page and what it parses into: raise the planner's memory with it."
    ))
    requery_page_attempts: int = Field(5, ge=1, description=(
        "Fetches of one page (HTTP error, not JSON, not a page) before the job is paused with the reason "
        "(`paused_by = system:planner`)."
    ))
    requery_backoff_initial_s: float = Field(0.5, ge=0, description=(
        "First wait between fetch attempts; doubles each time, plus up to as much again of jitter."
    ))
    requery_backoff_max_s: float = Field(30.0, ge=0, description="Longest wait between fetch attempts.")
    requery_lease_s: float = Field(120.0, gt=0, description=(
        "Paging lease of a job, renewed with every page: a dead planner's jobs are taken over after this. Must "
        "outlast one page's attempts (`PAGE_ATTEMPTS × TIMEOUT_S` plus backoff)."
    ))
    requery_admission_wait_s: float = Field(5.0, gt=0, description=(
        "A requery page refused by admission control is fetched again after this."
    ))
    internal_attempts: int = Field(3, ge=1, description=(
        "A job request that fails with an unexpected error (a bug, not bad input and not an outage) is tried this"
        " many times, then dead-lettered as `internal error: <type>: <message>` (a request whose job is already "
        "stored is never dead-lettered). See [reliability](reliability.md#bad-input-job-requests)."
    ))
    retry_backoff_initial_s: float = Field(0.5, gt=0, description=(
        "First wait before trying a job request again (database or Kafka unavailable, or an unexpected error); "
        "doubles each time, plus jitter."
    ))
    retry_backoff_max_s: float = Field(30.0, gt=0, description=(
        "Longest wait between attempts at one job request. The database or Kafka being unavailable is waited out "
        "for as long as it takes: the request is never dead-lettered for it."
    ))
    publish_stall_s: float = Field(40.0, gt=0, description=(
        "When the planner's Kafka producer has served no delivery report at all for this long while it publishes a "
        "job's commands or a dead-letter record, the attempt fails and the producer is replaced by a new one: a "
        "client can stop reaching a broker that came back. The request is tried again, with backoff, through the "
        "new one; a job's commands are all published again (`redispatched`), and a page of a requery job being "
        "published through it at the time fails too, and is published again later. Logged as `Kafka producer "
        "replaced`, again at every attempt while Kafka is away. Keep it above librdkafka's `request.timeout.ms` "
        "(30 s): a broker that lost a replica can hold every acknowledgement that long, and a replacement starts a "
        "large job's dispatch over."
    ))
    approval_above_items: int | None = Field(None, ge=0, description=(
        "A job with more items than this is stored as `awaiting_approval` and sends nothing until an admin approves "
        "it (console *Approvals*, `POST /api/v1/jobs/{id}/approve`); unset: no size limit. A requery job is counted "
        "as its pages come: the page that takes the items paged so far past this holds the job for approval, in "
        "that page's transaction, so nothing beyond what was sent before it is sent, and paging stops until an admin"
        " decides (approved: paging goes on and the job is not asked again). See "
        "[operations](operations.md#approvals)."
    ))
    approve_new_content: bool = Field(False, description=(
        "A job whose message (template) no admin has approved before waits for approval too; approving it records "
        "the message as approved."
    ))
