"""Helpers for the Control API tests: the app over a real pool, tokens per role, seeding."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from pacer_common.db import operations
from pacer_common.db.pool import open_pool
from pacer_common.domain.tokens import Role
from pacer_control.app import build_app
from pacer_dev.fakegateway.process import free_port
from tests.integration.helpers import serving

ROLES = ("operator", "tech_admin", "admin")


class Api:
    """An httpx client on the app (ASGI, in process) plus a token per role."""

    def __init__(self, client: httpx.AsyncClient, tokens: dict[str, str]) -> None:
        self.client = client
        self.tokens = tokens

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    async def call(self, method: str, path: str, role: str | None = "admin", **kw: Any) -> httpx.Response:
        headers = {**kw.pop("headers", {}), **(self.auth(role) if role else {})}
        return await self.client.request(method, path, headers=headers, **kw)

    async def get(self, path: str, role: str | None = "admin", **kw: Any) -> httpx.Response:
        return await self.call("GET", path, role, **kw)

    async def post(self, path: str, role: str | None = "admin", **kw: Any) -> httpx.Response:
        return await self.call("POST", path, role, **kw)


async def make_tokens(url: str, prefix: str = "") -> dict[str, str]:
    """One token per role, made the way `pacer token create` makes them."""
    out = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for role in ROLES:
            made = await operations.create_token(conn, f"{prefix}{role}", Role(role), "test")
            out[role] = made.token
    return out


@contextlib.asynccontextmanager
async def control_api(url: str, token_prefix: str = "", **kw: Any) -> AsyncIterator[Api]:
    """The app on ``url`` and a token per role (named ``token_prefix`` + role: a prefix of its
    own lets a test open it more than once)."""
    pool = await open_pool(url, min_size=1, max_size=4, name="test-control")
    try:
        app = build_app(pool, **kw)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://control/api/v1") as client:
            yield Api(client, await make_tokens(url, token_prefix))
    finally:
        await pool.close()


def rows(url: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(sql, args).fetchall()


def audit(url: str, target_id: str | None = None) -> list[dict[str, Any]]:
    """Audit records (optionally of one target), oldest first."""
    if target_id is None:
        return rows(url, "SELECT * FROM audit_log ORDER BY id")
    return rows(url, "SELECT * FROM audit_log WHERE target_id = %s ORDER BY id", target_id)


# pacer_transition steps from pending; the last one may carry an error class.
_PATH = {
    "claimed": [("pending", "claimed", "ItemClaimed")],
    "failed": [("pending", "claimed", "ItemClaimed"), ("claimed", "submitted", "ItemSubmitted"),
               ("submitted", "failed", "ItemFailed")],
    "waiting_retry": [("pending", "claimed", "ItemClaimed"), ("claimed", "submitted", "ItemSubmitted"),
                      ("submitted", "waiting_retry", "ItemRetryScheduled")],
    "expired": [("pending", "expired", "ItemExpired")],
    "confirmed": [("pending", "claimed", "ItemClaimed"), ("claimed", "submitted", "ItemSubmitted"),
                  ("submitted", "confirmed", "ItemConfirmed")],
}


def move(url: str, items: list[str], status: str, error_class: str | None = None) -> None:
    """Walk pending ``items`` to ``status`` through the guarded transition function."""
    steps = _PATH[status]
    with psycopg.connect(url) as conn:
        for n, (src, dst, typ) in enumerate(steps):
            last = n == len(steps) - 1
            moved = conn.execute(
                "SELECT * FROM pacer_transition(%s::uuid[], ARRAY[%s]::item_status[], %s::item_status, %s,"
                " p_lease_owner => %s, p_lease_ttl => interval '30 seconds', p_clear_lease => %s,"
                " p_error_class => %s, p_error => %s)",
                (items, src, dst, typ, "w1" if dst == "claimed" else None, last and dst != "claimed",
                 error_class if last else None, f"test: {error_class}" if last and error_class else None),
            ).fetchall()
            assert len(moved) == len(items), f"could not move {items} {src} -> {dst}"


@contextlib.contextmanager
def control_server(url: str, **kw: Any) -> Iterator[tuple[str, dict[str, str]]]:
    """The Control API over HTTP on a free loopback port (its own loop, in a thread), for
    clients that are processes or blocking code (the command line); yields (base URL, tokens)."""
    port = free_port()
    ready, stop = threading.Event(), threading.Event()
    tokens: dict[str, str] = {}

    async def run() -> None:
        pool = await open_pool(url, min_size=1, max_size=4, name="test-control-http")
        tokens.update(await make_tokens(url, "cli-"))
        server, task = await serving(build_app(pool, **kw), port, "the Control API")
        ready.set()
        await asyncio.to_thread(stop.wait)
        server.should_exit = True
        await task
        await pool.close()

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(30), "the Control API did not start"
    try:
        yield f"http://127.0.0.1:{port}/api/v1", tokens
    finally:
        stop.set()
        thread.join(30)
