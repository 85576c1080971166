"""The reconciler's settings (``PACER_RECONCILER_*``), read in ``main()``."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from pacer_common.domain.segments import EVENT_SEGMENTS_MAX, EVENT_SEGMENTS_MIN
from pacer_common.settings import GatewayUrl, OpsSettings
from pacer_reconciler.domain.retention import Retention


class ReconcilerSettings(OpsSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_RECONCILER_")
    port: int = Field(9103, description="Ops HTTP port.")
    gateway_url: GatewayUrl = Field(default="http://127.0.0.1:8080", validation_alias="PACER_GATEWAY_URL", description=(
        "Base URL of the gateway, with its scheme (`http://` or `https://`; the reconciler refuses to start "
        "without it); in-doubt sends are verified with `POST /message/lookup` (JSON body `guid`,"
        " `idempotencyKey`)."
        " Same variable as the sender's."
    ))
    gateway_credential: SecretStr | None = Field(None, validation_alias="PACER_GATEWAY_CREDENTIAL", description=(
        "Bearer credential of the `default` tenant's gateway, as the sender's. Lookups go to the item's "
        "tenant's gateway (`tenants`)."
    ))
    tenants_refresh_s: float = Field(5.0, description="How often the tenant table is re-read.")
    gateway_timeout_s: float = Field(5.0, description=(
        "HTTP timeout of one lookup request, in seconds (`PACER_RECONCILER_VERIFY_TIMEOUT_S` cuts a lookup off "
        "too, whichever comes first)."
    ))
    sweep_interval_s: float = Field(1.0, description=(
        "Least time between two sweep rounds (expired leases, due retries). Verification rounds come sooner while "
        "in-doubt items wait for a free lookup slot (the next starts as soon as a lookup settles its item: the "
        "gateway said delivered or not delivered), this long apart otherwise, so a gateway that fails or cannot say "
        "gets at most `PACER_RECONCILER_VERIFY_CONCURRENCY` lookups this long; an item a lookup left in doubt is "
        "asked again no sooner than this after its answer."
    ))
    verify_deadline_s: float = Field(300.0, description=(
        "How long an item may stay `recovery_pending` while the gateway cannot say whether it was delivered; "
        "after that it becomes `unverified`. Counted from when the item became `recovery_pending`. While the "
        "gateway has asked the item's guid for quiet (a `Retry-After`, kept on its lease row) no lookup can be "
        "made, so nothing is decided, this deadline included, up to an hour from that start (the longest quiet "
        "a gateway may ask), and a minute more for a quiet then about to end, waited out for one lookup."
    ))
    verify_after_s: float = Field(15.0, description=(
        "An in-doubt send is first looked up only after it has been `recovery_pending` this long. Keep it at "
        "least `PACER_SENDER_GATEWAY_TIMEOUT_S`, so a request still on its way is not taken as \"not delivered\" "
        "(the service does not check this; the Helm chart does)."
    ))
    verify_concurrency: int = Field(default=16, ge=1, description=(
        "Gateway lookups of in-doubt sends running at once. They run in a task of their own, apart from the event"
        " tail: a slow or hanging gateway holds up verification only."
    ))
    verify_timeout_s: float = Field(default=5.0, gt=0, description=(
        "Deadline of one lookup. A lookup that times out is \"no answer yet\": the item stays `recovery_pending` "
        "and is asked again in a later round, no sooner than `PACER_RECONCILER_SWEEP_INTERVAL_S` after, until "
        "`PACER_RECONCILER_VERIFY_DEADLINE_S` makes it `unverified`. Never taken as proof of non-delivery."
    ))
    leader_ttl_s: float = Field(default=10.0, gt=0, description=(
        "TTL of each segment lease (table `leader_leases`). The owner renews it every TTL/3 and stops work on "
        "the segment once its last renewal is older than the TTL; another replica takes the segment over at most"
        " TTL + TTL/3 after its owner froze or vanished (docs/reliability.md). Pool connections also get "
        "`idle_in_transaction_session_timeout` = TTL/2, so an owner frozen inside a transaction cannot hold a "
        "lease row. Set the same value on every replica."
    ))
    segments: int = Field(default=16, ge=EVENT_SEGMENTS_MIN, le=EVENT_SEGMENTS_MAX, description=(
        "Segments the reconciler's work is split into by guid hash; each has its own lease (table "
        "`leader_leases`, rows `pacer-reconciler/<s>of<n>`), and replicas share them out: each holds at most "
        "ceil(segments / live replicas), so replicas beyond this count only stand by. Fixed per deployment: the"
        " same value on every replica, and the event index `item_events_segment_<n>` must exist (migrations "
        "create it for 16; `pacer migrate --event-segments <n>`, which the chart's migrate Job runs with this "
        "value, builds another count's online). To change it follow docs/reliability.md, \"Changing the segment "
        "count\"."
    ))
    max_message_bytes: int = Field(1_000_000, description=(
        "Outcomes and item commands larger than this are not published: logged with the reason, counted in "
        "`pacer_reconciler_bad_events_total{reason=\"unpublishable\"}`, and skipped. Keep it at most the "
        "item-outcomes and item-commands topics' `max.message.bytes`."
    ))
    error_backoff_max_s: float = Field(30.0, description=(
        "A segment's tail round that fails (database or Kafka down, a row it cannot get past, a defect) is logged, "
        "counted in `pacer_reconciler_round_errors_total{error}` and retried after an exponential back-off from 0.5 s "
        "up to this, of that segment alone: the other segments' tails and the sweeps go on. Other rounds that fail "
        "(the partition maintenance, the callbacks) back off the same way; the service does not exit."
    ))
    publish_stall_s: float = Field(10.0, gt=0, description=(
        "A tail round publishes its batch's outcomes and commands before it projects them. When its Kafka producer "
        "has served no delivery report at all (to any segment) for this long, the round fails "
        "(`pacer_reconciler_round_errors_total{error=\"ProduceStalled\"}`) and the reconciler replaces the producer: "
        "a client can stop reaching a broker that came back. The other rounds waiting on it fail too; each segment "
        "publishes its batch again at its next round, through the new one. While Kafka is away this repeats, "
        "logged each time."
    ))
    batch: int = Field(2000, description="Most events read from the event log per tail round.")
    breaker_consecutive: int = Field(20, description=(
        "Circuit breaker, per job and per guid: this many failed outcomes in a row pause it (`paused_by = "
        "system:breaker`). Failures are final failures and retries for `retryable`, `needs_human`, `bad_params` "
        "and `in_doubt` answers; rate limits and missed send deadlines do not count, and a send put in doubt by "
        "no answer of the gateway (the lease sweep's, its sender died after submit; `pacer after-restore`; a forced "
        "release; a retry or resolution of an item from before a restore) counts neither as a failure nor as a "
        "success."
    ))
    breaker_window: int = Field(100, description=(
        "The breaker's sliding window: the last this many outcomes of the job or guid."
    ))
    breaker_ratio: float = Field(0.5, description="Failure ratio over the window that pauses the job or guid.")
    breaker_min_samples: int = Field(40, description=(
        "The ratio rule applies only once the window holds this many outcomes."
    ))
    stall_after_s: float = Field(600.0, description=(
        "An open shard of a running job (guid not paused, online) with no progress for this long, beyond its "
        "guid's own longest gap between batch sends, counts in `pacer_reconciler_stalled_shards` (alert "
        "`PacerShardStalled`), unless the guid's limits hold it now: its quiet hours, or a send window whose "
        "batch share is used. Limits as the sender holding the guid applies them: the guid's own overrides over "
        "`*`'s over that sender's settings (`sender_limits`)."
    ))
    stall_count_every_s: float = Field(30.0, gt=0, description=(
        "How often the leader counts stalled shards (`pacer_reconciler_stalled_shards`): each count reads every "
        "open shard of a running job that has not moved for `PACER_RECONCILER_STALL_AFTER_S`, with its guid's "
        "limits, which at a fleet's scale is the leader's heaviest read. The guids by lifecycle state "
        "(`pacer_reconciler_guids_by_state`, `pacer_reconciler_held_guids_with_work`), which read every guid, are "
        "counted at the same pace, and so are the in-doubt items of guids keeping a gateway's quiet "
        "(`pacer_reconciler_in_doubt_quiet_items`), which reads every in-doubt item while any guid is quiet. Its "
        "other numbers are read at every sweep."
    ))
    backlog_top_n: int = Field(10, ge=1, le=100, description=(
        "How many guids and jobs the backlog metrics name: the top N guids by queued items, the top N by "
        "oldest wait, and the top N open jobs by items left."
    ))
    backlog_every_s: float = Field(30.0, gt=0, description=(
        "How often the leader refreshes the backlog metrics (one read of every pending item, and of the open "
        "jobs' shard counts: keep it at tens of seconds)."
    ))
    callbacks_group: str = Field("", description=(
        "Consumer group of the gateway callbacks topic (`<prefix>.callbacks`), read by every replica (not only "
        "the leader): `device.status` moves guid lifecycles, `media.ready` settles uploads. Empty: "
        "`<prefix>.reconciler.callbacks`."
    ))
    retain_items_days: int = Field(7, ge=1, description=(
        "Days `items` and `item_events` are kept after the end of their partition's period "
        "(`PACER_RECONCILER_PARTITION_PERIOD_DAYS`; a job's items and events are in the partition of the job's "
        "creation time), so between this and this + the period. A partition "
        "past it is dropped once every item in it is finished and every reconciler cursor has passed its events; "
        "until then it is kept and the reason logged. Every period kept is one more partition that each sender step "
        "reads: past about three months the steps cost Postgres about three times as much per send "
        "(docs/performance.md, \"How many weeks of items\")."
    ))
    retain_ledger_days: int = Field(35, ge=1, description=(
        "Days the send ledger keeps an idempotency key after the end of the week of the item that reserved it: "
        "as long as a duplicate is possible (the longest retry, compensation or resend window, plus the gateway's own dedupe "
        "window). At least `PACER_RECONCILER_RETAIN_ITEMS_DAYS`: a key outlives its items."
    ))
    retain_audit_days: int = Field(400, ge=1, description=(
        "Days `audit_log` is kept: the longest of all (it is small)."
    ))
    retain_conflicts_days: int = Field(90, ge=1, description="Days `operator_conflicts` (refused retries) is kept.")
    retain_state_history_days: int = Field(90, ge=1, description=(
        "Days `guid_state_history` (every change of a guid's lifecycle state) is kept."
    ))
    retain_usage_days: int = Field(400, ge=1, description=(
        "Days of per-tenant daily send counts (`tenant_usage`, one row per tenant and its local day; today's "
        "is the one the quota reads) are kept; older days are deleted at each maintenance run."
    ))
    partition_period_days: int = Field(7, ge=1, le=7, description=(
        "Days of job creation times each partition of `items` and `item_events` holds (`send_ledger` keeps 7: "
        "every key reservation looks in each of its partitions). Rows are kept between their retention and their "
        "retention + this, and each partition is one more that every query by guid reads. 1 halves the rows held "
        "at the default retention, at about a third more Postgres CPU per send at a sender's full rate "
        "(docs/performance.md, \"Daily partitions, measured again\"). A change applies to the partitions made from "
        "then on; those made already keep their periods. The same on every replica."
    ))
    partitions_ahead_days: int = Field(3, ge=1, description=(
        "Time partitions are created this many days ahead, so a row never waits for one (a row whose partition "
        "is missing goes to the table's default partition, and is moved out when the partition is created). "
        "Every partition is one more index probe for a query by guid, so not many more than needed."
    ))
    maintain_every_s: float = Field(3600.0, gt=0, description=(
        "How often partitions are created ahead and those past retention dropped (every replica tries; one at a "
        "time runs, under a lock in the database)."
    ))
    analyze_every_s: float = Field(60.0, gt=0, description=(
        "How often the time partitions that hold rows (1 MiB or more) but were never analyzed (or were analyzed "
        "while still empty) are given statistics that count them: a new period's partition that fills before "
        "autovacuum reaches it is otherwise planned blind. Each is analyzed once; autovacuum keeps its statistics "
        "after that (one replica at a time, under a lock in the database)."
    ))

    def retention(self) -> Retention:
        return Retention(items_days=self.retain_items_days, ledger_days=self.retain_ledger_days,
                         audit_days=self.retain_audit_days, conflicts_days=self.retain_conflicts_days,
                         state_history_days=self.retain_state_history_days, usage_days=self.retain_usage_days)

    @model_validator(mode="after")
    def _retention_is_consistent(self) -> ReconcilerSettings:
        self.retention()  # refuse inconsistent retention at start-up
        return self
