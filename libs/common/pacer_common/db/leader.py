"""Leadership for singleton duties: a session advisory lock held on a dedicated connection.

If the connection dies, Postgres releases the lock, so a partitioned leader loses it; the
holder checks its connection before each round of work and steps down when it is gone.
"""

from __future__ import annotations

import logging
import zlib

import psycopg

log = logging.getLogger(__name__)


class LeaderLock:
    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name
        self.key = zlib.crc32(name.encode())
        self._conn: psycopg.AsyncConnection[object] | None = None

    async def hold(self) -> bool:
        """True while this process holds the lock; tries to take it when it does not."""
        if self._conn is not None:
            try:
                await self._conn.execute("SELECT 1")
                return True
            except psycopg.Error:
                log.warning("leadership of %s lost with its connection", self.name)
                await self.release()
        try:
            conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True,
                                                         application_name=f"leader:{self.name}")
        except psycopg.Error:
            return False
        row = await (await conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,))).fetchone()
        if row and row[0]:
            self._conn = conn
            log.info("took leadership of %s", self.name)
            return True
        await conn.close()
        return False

    async def release(self) -> None:
        if self._conn is not None:
            try:
                await self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None
