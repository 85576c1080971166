"""Composition root of the Control API: settings, pool, uvicorn."""

from __future__ import annotations

import logging

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from pacer_common.db.pool import open_pool
from pacer_common.lifecycle import stop_event
from pacer_common.metrics import service_registry
from pacer_common.ops import Health, serve
from pacer_common.service import main_for
from pacer_common.settings import OpsSettings, PostgresSettings
from pacer_control.app import build_app

log = logging.getLogger("pacer.control")


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
    sandbox_targets: str = Field("", description=(
        "Comma-separated `to_id`s that `POST /test-send` may send to; empty: test sends are refused (`403`). "
        "A test send is a one-item job sent by the senders (lease, pacing, ledger); the control service never "
        "calls the gateway."
    ))

    def sandbox(self) -> frozenset[str]:
        return frozenset(t.strip() for t in self.sandbox_targets.split(",") if t.strip())


async def run(pg: PostgresSettings, cfg: ControlSettings) -> None:
    stop = stop_event()
    registry, health = service_registry("control"), Health()
    pool = await open_pool(pg.database_url.get_secret_value(), min_size=1, max_size=cfg.db_pool_max,
                           name="pacer-control")
    app = build_app(pool, sandbox_targets=cfg.sandbox(),
                    registry=registry, health=health, db_deadline_s=cfg.db_deadline_s)
    server, task = await serve(app, cfg.ops_host, cfg.port)
    health.set_ready(True, "serving")
    log.info("control started; API on http://%s:%d/api/v1 (docs: /api/v1/docs)", cfg.ops_host, cfg.port)
    try:
        await stop.wait()
    finally:
        health.set_ready(False, "stopping")
        server.should_exit = True
        await task
        await pool.close()
        log.info("control stopped")


def main() -> None:
    cfg = ControlSettings()
    main_for("control", cfg.log_level, run(PostgresSettings(), cfg))
