"""The Control API's cap on request bodies (PACER_CONTROL_MAX_BODY_BYTES): a body past it is
answered 413 before the app reads it (FastAPI reads a body whole before the route's token
check), streamed or not; what is within it, and the dry run within its own limit, still work."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

from pacer_control.settings import ControlSettings
from tests.integration.control_support import control_api
from tests.integration.helpers import seed_job

LIMIT = 64 * 1024


def test_a_body_past_the_limit_without_a_token_is_a_413_not_a_401_after_reading_it(database_url: str) -> None:
    async def go() -> None:
        async with control_api(database_url, max_body_bytes=LIMIT) as api:
            big = b'{"reason": "' + b"x" * (4 * LIMIT) + b'"}'
            r = await api.post(f"/jobs/{uuid.uuid4()}/pause", role=None, content=big,
                               headers={"Content-Type": "application/json"})
            assert r.status_code == 413, r.text
            detail = r.json()["detail"]
            assert f"larger than {LIMIT:,} bytes" in detail and "PACER_CONTROL_MAX_BODY_BYTES" in detail, detail
            # A body within the limit is refused for want of a token, as before.
            small = await api.post(f"/jobs/{uuid.uuid4()}/pause", role=None, json={"reason": "x"})
            assert small.status_code == 401, small.text

    asyncio.run(go())


def test_a_streamed_body_without_content_length_is_cut_off_at_the_limit(database_url: str) -> None:
    chunk, chunks = b" " * 4096, 1024  # 4 MiB offered, 64 KiB allowed
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"reason": "x"'
        for _ in range(chunks):
            sent += 1
            yield chunk
        yield b"}"

    async def go() -> None:
        async with control_api(database_url, max_body_bytes=LIMIT) as api:
            r = await api.post(f"/jobs/{uuid.uuid4()}/pause", "operator", content=body(),
                               headers={"Content-Type": "application/json"})
            assert "content-length" not in r.request.headers
            assert r.status_code == 413, r.text
            assert "PACER_CONTROL_MAX_BODY_BYTES" in r.json()["detail"]
            assert sent <= LIMIT // len(chunk) + 2, f"{sent} chunks of {chunks} read: the app read past the limit"

    asyncio.run(go())


def test_a_console_form_past_the_limit_is_a_413(database_url: str) -> None:
    async def go() -> None:
        async with control_api(database_url, max_body_bytes=LIMIT) as api:
            r = await api.client.post("http://control/console/part/guids/g1/release-lock",
                                      content=b"reason=" + b"x" * (2 * LIMIT), headers=api.auth("admin") | {
                                          "Content-Type": "application/x-www-form-urlencoded"})
            assert r.status_code == 413, r.text

    asyncio.run(go())


def test_the_largest_legitimate_bodies_fit_the_default_limit(database_url: str) -> None:
    job, _, _ = seed_job(database_url, {"g1": 1})
    default = ControlSettings().max_body_bytes

    async def go() -> None:
        async with control_api(database_url) as api:  # the default limit
            ok = await api.post(f"/jobs/{job}/pause", "operator", json={"reason": "customer asked"})
            assert ok.status_code == 200 and ok.json()["outcome"] == "done", ok.text
            # A retry of 10,000 item ids, the most one takes, pretty-printed: within the limit
            # (none is this job's item: refused for that, not for its size).
            ids = ",\n    ".join(f'"{uuid.uuid4()}"' for _ in range(10_000))
            retry = f'{{\n  "item_ids": [\n    {ids}\n  ],\n  "reason": "a bulk retry"\n}}'.encode()
            assert len(retry) < default
            r = await api.post(f"/jobs/{job}/retry", "operator", content=retry,
                               headers={"Content-Type": "application/json"})
            assert r.status_code != 413 and r.status_code < 500, r.text
            # The dry run has a limit of its own (PACER_CONTROL_DRY_RUN_MAX_BYTES): a request within it
            # is planned, a larger one refused before it is read or its token checked.
            dry_limit = ControlSettings().dry_run_max_bytes
            dry = await api.post("/dry-run", "operator", content=b"{" + b" " * (dry_limit - 2) + b"}")
            assert dry.status_code == 422 and "invalid job request" in dry.json()["detail"], dry.text
            past = await api.post("/dry-run", role=None, content=b"{" + b" " * dry_limit + b"}")
            assert past.status_code == 413 and "PACER_CONTROL_DRY_RUN_MAX_BYTES" in past.json()["detail"], past.text

    asyncio.run(go())
