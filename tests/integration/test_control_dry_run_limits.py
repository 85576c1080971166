"""What a control process spends on dry runs: a request of at most PACER_CONTROL_DRY_RUN_MAX_BYTES
(what a control pod's memory takes, not the planner's 64 MiB: tests/unit/test_dry_run_memory.py)
and at most PACER_CONTROL_DRY_RUN_CONCURRENCY planned at a time; another waits briefly for its
turn, then is told to try again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI

from pacer_common.db.pool import open_pool
from pacer_control.api.admin import DryRuns
from pacer_control.app import build_app
from pacer_control.settings import ControlSettings
from tests.integration.control_support import make_tokens
from tests.integration.helpers import eventually


@asynccontextmanager
async def api(url: str, **kw: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    pool = await open_pool(url, min_size=1, max_size=4, name="test-dry-runs")
    try:
        app = build_app(pool, **kw)
        headers = {"Authorization": f"Bearer {(await make_tokens(url))['operator']}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://control/api/v1",
                                     headers=headers) as client:
            yield client, app
    finally:
        await pool.close()


def test_a_dry_run_past_the_default_cap_is_a_413_naming_the_cap_and_its_setting(database_url: str) -> None:
    cap = ControlSettings().dry_run_max_bytes

    async def streamed(body: bytes) -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        for at in range(0, len(body), 1 << 16):
            yield body[at:at + (1 << 16)]

    async def go() -> None:
        async with api(database_url, dry_run_max_bytes=cap) as (client, _):  # the setting's default
            past = b"{" + b" " * cap + b"}"
            for content in (past, streamed(past)):
                r = await client.post("/dry-run", content=content)
                assert r.status_code == 413, r.text
                detail = r.json()["detail"]
                assert f"larger than {cap:,} bytes" in detail and "PACER_CONTROL_DRY_RUN_MAX_BYTES" in detail, detail
            # At the cap it is read and planned (refused here for what it says, not for its size).
            at = await client.post("/dry-run", content=b"{" + b" " * (cap - 2) + b"}")
            assert at.status_code == 422 and "invalid job request" in at.json()["detail"], at.text

    asyncio.run(go())


def test_a_dry_run_while_another_is_planned_waits_briefly_for_its_turn_then_is_told_to_retry(
        database_url: str) -> None:
    async def go() -> None:
        async with api(database_url, dry_run_concurrency=1, dry_run_wait_s=0.5) as (client, _):
            reading, done = asyncio.Event(), asyncio.Event()

            async def slow() -> AsyncIterator[bytes]:  # a dry run whose body is still coming
                yield b"{"
                reading.set()
                await done.wait()
                yield b"}"

            first = asyncio.create_task(client.post("/dry-run", content=slow()))
            await asyncio.wait_for(reading.wait(), 30)
            second = await client.post("/dry-run", content=b"{}")
            assert second.status_code == 503, second.text
            detail = second.json()["detail"]
            assert "another dry run is being planned" in detail and "PACER_CONTROL_DRY_RUN_CONCURRENCY" in detail
            assert "try again" in detail, detail
            done.set()
            assert (await asyncio.wait_for(first, 30)).status_code == 422  # planned: an empty request is refused
            # The turn given back, the next one is planned.
            again = await client.post("/dry-run", content=b"{}")
            assert again.status_code == 422 and "invalid job request" in again.json()["detail"], again.text

    asyncio.run(go())


def test_a_dry_run_waiting_for_its_turn_is_planned_when_the_one_before_ends(database_url: str) -> None:
    async def go() -> None:
        async with api(database_url, dry_run_concurrency=1, dry_run_wait_s=30) as (client, app):
            runs: DryRuns = app.state.dry_runs
            reading, done = asyncio.Event(), asyncio.Event()

            async def slow() -> AsyncIterator[bytes]:
                yield b"{"
                reading.set()
                await done.wait()
                yield b"}"

            async def second_waits() -> bool:
                return runs.waiting == 1

            first = asyncio.create_task(client.post("/dry-run", content=slow()))
            await asyncio.wait_for(reading.wait(), 30)
            second = asyncio.create_task(client.post("/dry-run", content=b"{}"))
            await eventually(second_waits, 30, "the second dry run waiting for its turn")
            assert not second.done()
            done.set()
            for r in await asyncio.wait_for(asyncio.gather(first, second), 30):
                assert r.status_code == 422 and "invalid job request" in r.json()["detail"], r.text
            assert runs.waiting == 0

    asyncio.run(go())
