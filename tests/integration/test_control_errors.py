"""What the Control API and console answer when a request cannot be served: a clear 4xx for
the caller's input or the stored state, never a bare 500; and a defect's 500 still in words,
with an id that finds it in the log. On the real database."""

from __future__ import annotations

import asyncio
import logging
import re

import httpx
import psycopg
import pytest
from fastapi import FastAPI

from pacer_common.db.pool import open_pool
from pacer_control.adapters.postgres import PostgresControl
from pacer_control.api import errors
from pacer_control.domain.errors import Conflict
from tests.integration.control_support import control_api, rows
from tests.integration.helpers import seed_job

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def test_console_forms_refuse_values_they_do_not_know_in_words(database_url: str) -> None:
    job, _, _ = seed_job(database_url, {"g1": 1})

    async def go() -> None:
        async with control_api(database_url) as api:
            c, auth = api.client, api.auth("admin")
            kind = await c.get("http://control/console/part/jobs", params={"kind": "x"}, headers=auth)
            assert kind.status_code == 422 and "kind: 'x' is not one of takeover_prompt" in kind.json()["detail"], kind.text
            retry = await c.post(f"http://control/console/part/jobs/{job}/retry", content="status=bogus",
                                 headers=auth | FORM)
            assert retry.status_code == 422 and "status: 'bogus' is not one of" in retry.json()["detail"], retry.text
            budget = await c.post(f"http://control/console/part/jobs/{job}/budget",
                                  content="max_sends=%C2%B2", headers=auth | FORM)  # "²": a digit to str.isdigit
            assert budget.status_code == 422 and "max_sends" in budget.json()["detail"], budget.text

    asyncio.run(go())


def test_a_report_of_a_request_id_in_chinese_downloads_under_an_ascii_name(database_url: str) -> None:
    job, _, _ = seed_job(database_url, {"g1": 2})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET request_id = '订单-1' WHERE job_id = %s", (job,))

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.get(f"/jobs/{job}/report.csv", "operator")
            assert r.status_code == 200, r.text
            assert r.headers["content-disposition"] == 'attachment; filename="pacer-report-__-1.csv"'
            assert len(r.text.strip().splitlines()) == 3  # the header and two items

    asyncio.run(go())


def test_a_tenant_whose_jobs_are_pruned_is_deleted_with_its_send_counts(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('gone')")
        conn.execute("INSERT INTO tenant_usage (tenant, day, sends) VALUES ('gone', current_date - 3, 40),"
                     " ('gone', current_date, 2)")

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.call("DELETE", "/tenants/gone", json={"reason": "left"})
            assert r.status_code == 200 and r.json()["changed"], r.text

    asyncio.run(go())
    assert rows(database_url, "SELECT * FROM tenant_usage WHERE tenant = 'gone'") == []
    assert rows(database_url, "SELECT * FROM tenants WHERE name = 'gone'") == []


def test_a_write_that_conflicts_with_what_is_stored_is_a_409(database_url: str) -> None:
    async def go() -> None:
        pool = await open_pool(database_url, min_size=1, max_size=1, name="test-conflict")
        try:
            store = PostgresControl(pool)

            async def orphan() -> None:  # a row of a tenant deleted meanwhile: the foreign key refuses it
                async with pool.connection() as conn:
                    await conn.execute("INSERT INTO tenant_usage (tenant, day) VALUES ('no-such-tenant', current_date)")

            with pytest.raises(Conflict, match="conflicts with what is stored now"):
                await store._call(orphan)
        finally:
            await pool.close()

    asyncio.run(go())


def test_a_dry_run_past_its_cap_is_a_413_before_it_is_read(database_url: str) -> None:
    async def go() -> None:
        async with control_api(database_url, dry_run_max_bytes=1_000) as api:
            r = await api.post("/dry-run", role="operator", content=b"{" + b" " * 2_000 + b"}")
            assert r.status_code == 413 and "larger than 1,000 bytes" in r.json()["detail"], r.text
            assert "PACER_CONTROL_DRY_RUN_MAX_BYTES" in r.json()["detail"], r.text
            ok = await api.post("/dry-run", role="operator", content=b"{}")
            assert ok.status_code == 422 and "invalid job request" in ok.json()["detail"]

    asyncio.run(go())


def test_a_defect_is_a_500_in_words_with_an_id_found_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    app = FastAPI()
    errors.install(app)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a column that is not there")

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://control") as client:
            return await client.get("/boom")

    with caplog.at_level(logging.ERROR, logger="pacer.control"):
        r = asyncio.run(call())
    assert r.status_code == 500
    detail = r.json()["detail"]
    found = re.fullmatch(r"internal error ([0-9a-f]{12}): the control service's log has it .*", detail)
    assert found, detail
    assert "column" not in detail, "no internals in the answer"
    (record,) = [rec for rec in caplog.records if getattr(rec, "error_id", None) == found.group(1)]
    assert record.exc_info and "a column that is not there" in str(record.exc_info[1])
