"""The audience adapter against a real HTTP server on a loopback port: one page request is
bounded in time (the whole answer, not each read) and in size (refused as it streams in)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import Response, StreamingResponse

from pacer_dev.fakegateway.process import free_port
from pacer_planner.adapters.http import HttpTargetSource
from pacer_planner.domain.targets import TargetFetchError
from tests.integration.helpers import serving

pytestmark = pytest.mark.timeout(60)

PAGE = {"items": [{"guid": "g", "to_id": f"r{i}", "vars": {"n": str(i)}} for i in range(3)], "next_cursor": None}


def on_server(app: FastAPI, scenario: Callable[[str], Awaitable[Any]]) -> Any:
    """``scenario(url)`` run against ``app`` served on a loopback port of its own."""
    async def go() -> Any:
        port = free_port()
        server, task = await serving(app, port, "the audience")
        try:
            return await scenario(f"http://127.0.0.1:{port}/audience")
        finally:
            server.should_exit = True
            await task

    return asyncio.run(go())


class Counting(httpx.AsyncBaseTransport):
    """The client's transport, counting the body bytes the client has taken off the connection."""

    def __init__(self) -> None:
        self.inner, self.read = httpx.AsyncHTTPTransport(), 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await self.inner.handle_async_request(request)
        assert isinstance(resp.stream, httpx.AsyncByteStream)
        return httpx.Response(resp.status_code, headers=resp.headers, stream=_Counted(resp.stream, self),
                              extensions=resp.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Counted(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, counter: Counting) -> None:
        self.inner, self.counter = inner, counter

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.counter.read += len(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


async def fetch(url: str, *, read_timeout_s: float = 5.0, transport: httpx.AsyncBaseTransport | None = None,
                **bounds: Any) -> tuple[Any, float]:
    """One page through the adapter; what it returned or raised, and how long it took."""
    async with httpx.AsyncClient(timeout=read_timeout_s, transport=transport) as client:
        started = time.monotonic()
        try:
            got: Any = await HttpTargetSource(client, **bounds).fetch(url, None, 500)
        except TargetFetchError as exc:
            got = exc
        return got, time.monotonic() - started


def test_a_page_within_its_bounds_is_read() -> None:
    app = FastAPI()

    @app.get("/audience")
    async def audience() -> Response:
        return Response(json.dumps(PAGE), media_type="application/json")

    got, _ = on_server(app, lambda url: fetch(url, deadline_s=5.0, max_bytes=len(json.dumps(PAGE))))
    assert got == PAGE


def test_an_answer_that_trickles_in_fails_at_the_deadline_though_each_read_is_in_time() -> None:
    # A byte every 20 ms keeps a 5 s read timeout from ever firing: without a deadline on the
    # whole answer the fetch held its pager (and the job's paging lease) for as long as it
    # trickled; here for 10 s, and then it was a good page.
    release = asyncio.Event()
    app = FastAPI()

    @app.get("/audience")
    async def audience() -> StreamingResponse:
        async def trickle() -> AsyncIterator[bytes]:
            for _ in range(500):
                yield b" "
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(release.wait(), 0.02)
                if release.is_set():
                    return
            yield json.dumps(PAGE).encode()

        return StreamingResponse(trickle(), media_type="application/json")

    async def scenario(url: str) -> tuple[Any, float]:
        try:
            return await fetch(url, read_timeout_s=5.0, deadline_s=0.5)
        finally:
            release.set()

    got, took = on_server(app, scenario)
    assert isinstance(got, TargetFetchError), got
    assert str(got) == "no whole answer within 0.5 s (the deadline of one page request)"
    assert 0.5 <= took < 5.0, took  # at the deadline: not at the read timeout, nor after the 10 s trickle


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_body_over_the_cap_is_refused_before_it_is_read_whole(declared: bool) -> None:
    # A good page behind 16 MiB of whitespace; the cap is 256 KiB. Read whole, it was a page.
    chunk, chunks = b" " * 65_536, 256
    app = FastAPI()

    @app.get("/audience")
    async def audience() -> Response:
        if declared:
            return Response(chunk * chunks + json.dumps(PAGE).encode(), media_type="application/json")

        async def stream() -> AsyncIterator[bytes]:
            for _ in range(chunks):
                yield chunk
            yield json.dumps(PAGE).encode()

        return StreamingResponse(stream(), media_type="application/json")

    counting = Counting()
    got, _ = on_server(app, lambda url: fetch(url, deadline_s=20.0, max_bytes=262_144, transport=counting))
    assert isinstance(got, TargetFetchError), type(got)
    assert str(got).startswith("response is over 262144 bytes, the most one page may have")
    assert ("Content-Length: " in str(got)) == declared
    assert counting.read <= 262_144 + 2 * len(chunk), f"{counting.read} bytes read off the connection"


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_body_is_inflated_no_further_than_the_cap(encoding: str) -> None:
    # 32 MiB of whitespace before a good page, compressed to about 32 KiB: one chunk off the
    # wire. Decoded by the client, that chunk was inflated whole before the cap was looked at.
    plain = b" " * (32 << 20) + json.dumps(PAGE).encode()
    body = gzip.compress(plain) if encoding == "gzip" else zlib.compress(plain)
    app = FastAPI()

    @app.get("/audience")
    async def audience() -> Response:
        return Response(body, media_type="application/json", headers={"content-encoding": encoding})

    async def scenario(url: str) -> tuple[Any, int]:
        tracemalloc.start()
        try:
            got, _ = await fetch(url, deadline_s=20.0, max_bytes=262_144)
            return got, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    got, peak = on_server(app, scenario)
    assert isinstance(got, TargetFetchError), type(got)
    assert str(got) == "response is over 262144 bytes, the most one page may have"
    assert peak < (8 << 20), f"{peak >> 20} MiB allocated at the peak for a 256 KiB cap"

    app_ok = FastAPI()

    @app_ok.get("/audience")
    async def small() -> Response:
        page = json.dumps(PAGE).encode()
        return Response(gzip.compress(page) if encoding == "gzip" else zlib.compress(page),
                        media_type="application/json", headers={"content-encoding": encoding})

    got, _ = on_server(app_ok, lambda url: fetch(url, deadline_s=5.0, max_bytes=len(json.dumps(PAGE))))
    assert got == PAGE
