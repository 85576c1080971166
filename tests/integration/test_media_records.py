"""The media records of a guid on the real database: every upload the gateway refused is kept,
each under an id of its own, however many urls of one guid it refuses."""

from __future__ import annotations

import asyncio

from pacer_common.db.pool import open_pool
from pacer_common.domain.requests import MediaMessage
from pacer_common.gateway import failed_upload
from pacer_sender.adapters.actions import PostgresActions


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
