"""The Control API's settings (``PACER_CONTROL_*``), read in ``main()``."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from pacer_common.settings import OpsSettings


class ControlSettings(OpsSettings):
    """``PACER_CONTROL_*``. The API and /healthz, /readyz, /metrics share one port."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_CONTROL_")
    port: int = Field(9104, description="HTTP port of the API, the console and the ops endpoints.")
    db_pool_max: int = Field(10, description=(
        "Postgres connections at most (a CSV report download holds one while it streams)."
    ))
    db_deadline_s: float = Field(5.0, description=(
        "How long a request retries a transient database error before answering `503`."
    ))
    stalled_after_s: float = Field(120.0, gt=0, description=(
        "The console's and the API's *stalled* marks: an open shard of a running job, and a guid with an item "
        "ready, that have not moved for this long beyond what the guid's limits explain (its quiet hours, a send "
        "window's cap, its longest gap between sends by interval, online reserve and jitter as the sender holding "
        "it applies them, or a shard's job's own interval). The alert is the reconciler's "
        "`PACER_RECONCILER_STALL_AFTER_S`."
    ))
    sandbox_targets: str = Field("", description=(
        "Comma-separated `to_id`s that `POST /test-send` may send to; empty: test sends are refused (`403`). "
        "A test send is a one-item job sent by the senders (lease, pacing, ledger); the control service never "
        "calls the gateway."
    ))

    def sandbox(self) -> frozenset[str]:
        return frozenset(t.strip() for t in self.sandbox_targets.split(",") if t.strip())
