"""The Control API's settings (``PACER_CONTROL_*``), read in ``main()``."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from pacer_common.domain.requests import MAX_REQUEST_BYTES
from pacer_common.settings import OpsSettings


class ControlSettings(OpsSettings):
    """``PACER_CONTROL_*``. The API and /healthz, /readyz, /metrics share one port."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_CONTROL_")
    port: int = Field(9104, description="HTTP port of the API, the console and the ops endpoints.")
    db_pool_max: int = Field(10, description=(
        "Postgres connections at most (a CSV report download takes one only while it reads a page of items, "
        "never while it waits on its client)."
    ))
    db_deadline_s: float = Field(5.0, gt=0, description=(
        "How long a request retries a transient database error, or waits for a pooled connection while all "
        "`PACER_CONTROL_DB_POOL_MAX` are in use, before answering `503`."
    ))
    statement_timeout_s: float = Field(30.0, ge=0, description=(
        "The server stops a statement of the API or the console that runs longer (Postgres `statement_timeout` "
        "on the control service's connections), and the request is answered `503` saying so: a heavy read goes on "
        "no longer than this, whether or not its client is still waiting. `0`: the server's own default. "
        "Operators' actions (a cancel of a job of a million items takes tens of seconds; stopped, it would roll "
        "back whole) run to their end whatever this says. The longest reads are well within 30 s: a page of a "
        "CSV report (`PACER_CONTROL_REPORT_PAGE_ROWS`), a page of a job's items, a job's summary."
    ))
    stalled_after_s: float = Field(120.0, gt=0, description=(
        "The console's and the API's *stalled* marks: an open shard of a running job, and a guid with an item "
        "ready, that have not moved for this long beyond what the guid's limits explain (its quiet hours, a send "
        "window's cap, its longest gap between sends by interval, online reserve and jitter as the sender holding "
        "it applies them, or a shard's job's own interval). The alert is the reconciler's "
        "`PACER_RECONCILER_STALL_AFTER_S`."
    ))
    counts_share: float = Field(0.05, gt=0, le=1, description=(
        "A job's counts (items per status and shards per status, in the API's `GET /jobs/{job_id}` and the "
        "console's job page) are one aggregate over its shards: about 15 ms at 10,000 shards, 150 ms at 100,000. "
        "A read that took longer than `PACER_CONTROL_COUNTS_FRESH_MS` is kept and reused, by every tab and "
        "client of this process, until reading it again would take more than this share of the time: for 19 "
        "times what it took at 0.05 (about 3 s at 100,000 shards), never over 5 s; while one caller reads them "
        "again, the others are given those kept, and an operator's action on the job forgets them. "
        "`counts_read_at` says when they were read. `1`: never kept."
    ))
    counts_fresh_ms: float = Field(20.0, ge=0, description=(
        "A job's counts that are read in less than this many milliseconds are read afresh for every caller "
        "(a job of fewer than about 10,000 shards); see `PACER_CONTROL_COUNTS_SHARE`."
    ))
    report_page_rows: int = Field(2000, gt=0, le=100_000, description=(
        "Items a CSV report download (`GET /jobs/{job_id}/report.csv`) reads at a time, by item id: each page on "
        "a pooled connection of its own, given back before the page is written to the client. Larger pages "
        "make fewer reads; each holds its connection longer and its rows in memory until written."
    ))
    max_body_bytes: int = Field(1_048_576, gt=0, description=(
        "The largest request body the API and the console take, in bytes; a larger one is answered `413` "
        "before it is read (a body without `Content-Length`: once this much has come). The largest bodies "
        "the API takes are a retry of 10,000 item ids (about 400 KB); `POST /dry-run` has a limit of its own, "
        "`PACER_CONTROL_DRY_RUN_MAX_BYTES`. FastAPI reads a body whole before the route's token check, so this "
        "also bounds what a caller without a token can make the service hold."
    ))
    dry_run_max_bytes: int = Field(4_194_304, gt=0, le=MAX_REQUEST_BYTES, description=(
        "The largest job request `POST /dry-run` takes, in bytes (at most 67108864, the 64 MiB the planner "
        "takes); a larger one is answered `413` before it is read. A dry run holds its targets parsed, each "
        "target's message rendered only while it is checked (and for the samples shown): about 25 times the "
        "request in memory at most, whatever the template. 4 MiB (40,000 to 150,000 targets) peaks at about "
        "145 MiB with the service's own, within the chart's 384 MiB for a control pod; raise the pod's memory "
        "limit with it. Dry-run a part of a larger request's targets, or publish it: the planner plans it or "
        "says why not in its dead letter. A dead-lettered request's republish is checked the same way, within "
        "the same size (a larger one is answered `422`: `pacer dead-letters republish --raw` sends it unchecked, "
        "and the planner checks it)."
    ))
    dry_run_concurrency: int = Field(1, ge=1, le=16, description=(
        "Dry runs, and republishes' checks, one control process makes at a time (each may hold about 25 times "
        "its request in memory: `PACER_CONTROL_DRY_RUN_MAX_BYTES`). Another waits up to 10 s for its turn, before "
        "its body is read, then is answered `503` (try again)."
    ))
    sandbox_targets: str = Field("", description=(
        "Comma-separated `to_id`s that `POST /test-send` may send to; empty: test sends are refused (`403`). "
        "A test send is a one-item job sent by the senders (lease, pacing, ledger); the control service never "
        "calls the gateway."
    ))

    def sandbox(self) -> frozenset[str]:
        return frozenset(t.strip() for t in self.sandbox_targets.split(",") if t.strip())
