"""The media records of a guid on the real database: every upload the gateway refused is kept,
each under an id of its own, however many urls of one guid it refuses; a poll's answer about
an upload made again since changes nothing."""

from __future__ import annotations

import asyncio

from pacer_common.db.pool import open_pool
from pacer_common.domain.requests import MediaMessage
from pacer_common.gateway import MediaAnswer, failed_upload
from pacer_sender.adapters.actions import PostgresActions
from pacer_sender.domain.media import MediaRow


def test_two_refused_uploads_of_one_guid_are_both_recorded_failed(database_url: str) -> None:
    async def go() -> list[tuple[str, str]]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            store = PostgresActions(pool)
            rows: list[tuple[str, str]] = []
            for n, url_hash in enumerate(("a" * 64, "b" * 64)):
                msg = MediaMessage(type="image", url=f"https://cdn.example/{n}.png")
                row = await store.uploaded("g-1", url_hash, msg, failed_upload(url_hash, "40001: bad url"), 0)
                rows.append((row.status, row.reason or ""))
            return rows
        finally:
            await pool.close()

    assert asyncio.run(go()) == [("failed", "40001: bad url"), ("failed", "40001: bad url")]


def test_a_poll_of_an_earlier_upload_leaves_the_media_uploaded_again_as_it_is(database_url: str) -> None:
    async def go() -> tuple[MediaRow | None, MediaRow | None]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            store = PostgresActions(pool)
            msg = MediaMessage(type="image", url="https://cdn.example/a.png")
            await store.uploaded("g-2", "c" * 64, msg, MediaAnswer("m-old", "pending", None, 0.0), 0)
            await store.uploaded("g-2", "c" * 64, msg, MediaAnswer("m-new", "pending", None, 0.0), 1)
            late = await store.checked("g-2", "c" * 64, "m-old", "failed", "status poll refused")
            return late, await store.media("g-2", "c" * 64)
        finally:
            await pool.close()

    late, row = asyncio.run(go())
    assert late is None, "a late answer about the old upload changes nothing"
    assert row is not None and (row.media_id, row.status, row.generation) == ("m-new", "pending", 1)
