"""The CSV report download on a real Postgres: read a page of items at a time by item id, each
page on a pooled connection that is given back before the page is written to the client."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import math
import uuid
from collections.abc import AsyncIterator, MutableMapping
from datetime import UTC, datetime
from typing import Any

import httpx
from fastapi import FastAPI

from pacer_common.db.pool import Pool, open_pool
from pacer_control.app import build_app
from pacer_control.domain import report
from tests.integration.control_support import make_tokens, move
from tests.integration.helpers import eventually, seed_job, sql, tuples

# The report as one read of every item would write it: the order the download promises.
ONE_READ = ("SELECT item_id::text, guid, to_id, status::text, attempts, last_error_class, last_error, updated_at"
            " FROM items WHERE job_id = %s ORDER BY items.item_id")


def one_read(url: str, job: str) -> bytes:
    return (report.header() + report.lines(tuples(url, ONE_READ, job))).encode()


class Download:
    """A GET of a job's report driven as a server drives the app (ASGI), keeping each body
    chunk as the app sends it. With ``pause_after``, the client stops reading once that many
    chunks came: the app's ``send`` does not return, as a server's does not while its client
    reads nothing, until :meth:`resume`."""

    def __init__(self, app: FastAPI, job: str, token: str, pause_after: int | None = None) -> None:
        self.app, self.job, self.token, self.pause_after = app, job, token, pause_after
        self.messages: list[MutableMapping[str, Any]] = []
        self.paused, self._go_on, self._done = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._asked = False

    @property
    def chunks(self) -> list[bytes]:
        return [m["body"] for m in self.messages if m["type"] == "http.response.body" and m["body"]]

    @property
    def status(self) -> int:
        return int(next(m["status"] for m in self.messages if m["type"] == "http.response.start"))

    async def run(self) -> bytes:
        path = f"/api/v1/jobs/{self.job}/report.csv"
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
                 "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
                 "query_string": b"", "client": ("127.0.0.1", 50000), "server": ("control", 80),
                 "headers": [(b"host", b"control"), (b"authorization", f"Bearer {self.token}".encode())]}
        try:
            await self.app(scope, self._receive, self._send)
        finally:
            self._done.set()
        assert self.messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
        return b"".join(self.chunks)

    def resume(self) -> None:
        self._go_on.set()

    async def _receive(self) -> dict[str, Any]:
        if not self._asked:
            self._asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._done.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: MutableMapping[str, Any]) -> None:
        self.messages.append(message)
        if message["type"] == "http.response.body" and len(self.chunks) == self.pause_after:
            self.paused.set()
            await self._go_on.wait()


@contextlib.asynccontextmanager
async def control_on(url: str, pool_max: int, page_rows: int) -> AsyncIterator[tuple[FastAPI, Pool, dict[str, str]]]:
    """The app over a pool of ``pool_max`` connections, reading reports ``page_rows`` items a
    page; with a token per role."""
    pool = await open_pool(url, min_size=1, max_size=pool_max, name="test-report")
    try:
        yield build_app(pool, report_page_rows=page_rows), pool, await make_tokens(url)
    finally:
        await pool.close()


def by_id(ids: list[str]) -> list[str]:
    return sorted(ids, key=uuid.UUID)  # as Postgres orders uuids: byte by byte


def test_a_report_of_many_pages_is_every_item_once_by_id_as_one_read_writes_it(database_url: str) -> None:
    created = datetime.now(UTC)
    job, _, items = seed_job(database_url, {"g1": 9, "=g2": 8, "g3": 6}, created_at=created)
    # Another job created in the same millisecond: its item ids share the prefix and fall
    # among this job's, inside the range the pages walk.
    seed_job(database_url, {"g1": 5}, created_at=created, key_prefix="other-")
    # Fifteen copies of one item under ids that differ from its id in the last hex digit alone,
    # every other column the same: pages of four split them, and only the id tells them apart.
    base = by_id(items)[len(items) // 2]
    twins = [base[:-1] + d for d in "0123456789abcdef" if d != base[-1]]
    for twin in twins:
        sql(database_url, "INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority,"
                          " kind, status, created_at, updated_at)"
                          " SELECT %s, job_id, shard_id, guid, to_id, content, 'twin-' || %s, priority, kind, status,"
                          " created_at, updated_at FROM items WHERE item_id = %s", twin, twin, base)
    # Cells to quote: a comma and quotes, a line break, a formula, Chinese.
    move(database_url, items[:3], "failed", "bad_params")
    sql(database_url, "UPDATE items SET to_id = 'room, \"7\"', last_error = E'refused:\\nline two' WHERE item_id = %s",
        items[0])
    sql(database_url, "UPDATE items SET last_error = '=SUM(A1)', to_id = '群聊-1' WHERE item_id = %s", items[1])
    every = items + twins
    page = 4

    async def go() -> Download:
        async with control_on(database_url, pool_max=4, page_rows=page) as (app, _, tokens):
            download = Download(app, job, tokens["operator"])
            await asyncio.wait_for(download.run(), 60)
            return download

    download = asyncio.run(go())
    assert download.status == 200
    body = b"".join(download.chunks)
    assert body == one_read(database_url, job)  # byte for byte, in the same order
    lines = list(csv.reader(io.StringIO(body.decode())))
    assert [line[0] for line in lines[1:]] == by_id(every)  # each item once, none of the other job's
    # One chunk per page, each a page of four but the last.
    assert download.chunks[0] == report.header().encode()
    pages = [list(csv.reader(io.StringIO(c.decode()))) for c in download.chunks[1:]]
    assert len(pages) == math.ceil(len(every) / page) > 5
    assert [len(p) for p in pages] == [page] * (len(pages) - 1) + [len(every) - page * (len(pages) - 1)]


def test_a_download_its_client_stopped_reading_holds_no_connection_and_shows_items_as_each_page_read_them(
        database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 17, "g2": 13})
    ids = by_id(items)
    written, unread = ids[0], ids[-1]  # on the first page, and on the last (of six)

    async def go() -> Download:
        async with control_on(database_url, pool_max=1, page_rows=5) as (app, pool, tokens):
            download = Download(app, job, tokens["operator"], pause_after=3)  # the header and two pages
            running = asyncio.create_task(download.run())
            await asyncio.wait_for(download.paused.wait(), 30)

            # The only connection is back in the pool while the client reads nothing (once the
            # page read ahead of the client, if any, is read).
            async def returned() -> bool:
                stats = pool.get_stats()
                return (stats["pool_size"], stats.get("pool_available", 0)) == (1, 1)

            await eventually(returned, 10, "the pool's one connection back while the download waits on its client")
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://control/api/v1") as client:
                auth = {"Authorization": f"Bearer {tokens['operator']}"}
                seen = await asyncio.wait_for(client.get(f"/jobs/{job}", headers=auth), 20)
                assert (seen.status_code, seen.json()["job_id"]) == (200, job), seen.text
                for item in (written, unread):  # writes too, on the same one connection
                    r = await asyncio.wait_for(client.post(f"/items/{item}/cancel", headers=auth), 20)
                    assert (r.status_code, r.json()["status"]) == (200, "abandoned"), r.text
            assert not running.done()

            download.resume()
            await asyncio.wait_for(running, 60)
            return download

    download = asyncio.run(go())
    assert download.status == 200
    lines = list(csv.reader(io.StringIO(b"".join(download.chunks).decode())))
    assert [line[0] for line in lines[1:]] == ids
    status = {line[0]: line[3] for line in lines[1:]}
    # Not a snapshot: each item as its page found it.
    assert (status[written], status[unread]) == ("pending", "abandoned")
    assert {status[i] for i in ids[1:-1]} == {"pending"}
