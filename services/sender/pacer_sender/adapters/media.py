"""Jobs' messages and the guids' uploaded media, on Postgres (``media`` table)."""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from pacer_common.db.errors import with_retry
from pacer_common.db.pool import Pool
from pacer_common.db.sql import loader
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.requests import MediaMessage, Message, TextMessage
from pacer_common.gateway import MediaAnswer
from pacer_sender.adapters.postgres import storable
from pacer_sender.adapters.queue import PostgresGuidQueue
from pacer_sender.domain.media import MediaRow

_sql = loader("pacer_sender.adapters.sql")
_message: TypeAdapter[TextMessage | MediaMessage] = TypeAdapter(Message)


def _row(r: Any) -> MediaRow:
    return MediaRow(r["media_id"], r["status"], r["reason"], r["uploaded_at"], r["checked_at"])


class PostgresMedia:
    def __init__(self, pool: Pool, cache_jobs: int = 4096) -> None:
        self.pool = pool
        self._messages: OrderedDict[str, TextMessage | MediaMessage] = OrderedDict()  # a job's message never changes
        self.cache_jobs = cache_jobs

    async def _one(self, name: str, params: dict[str, Any]) -> Any:
        """The statement's row, or None."""
        async def work() -> Any:
            async with self.pool.connection() as conn:
                return await (await conn.execute(_sql(name), params)).fetchone()

        return await with_retry(work)

    async def message_of(self, job_id: str) -> TextMessage | MediaMessage:
        msg = self._messages.get(job_id)
        if msg is None:
            row = await self._one("job_message", {"job": job_id})
            msg = _message.validate_python(row["message"]) if row else TextMessage(content="-")
            self._messages[job_id] = msg
            if len(self._messages) > self.cache_jobs:
                self._messages.popitem(last=False)
        return msg

    async def media(self, guid: str, url_hash: str) -> MediaRow | None:
        r = await self._one("media_get", {"guid": guid, "hash": url_hash})
        return None if r is None else _row(r)

    async def uploaded(self, guid: str, url_hash: str, msg: MediaMessage, answer: MediaAnswer) -> MediaRow:
        return _row(await self._one("media_uploaded", {
            "guid": guid, "hash": url_hash, "url": msg.url, "kind": msg.type, "file_name": msg.fileName,
            "media_id": answer.media_id, "status": answer.status, "reason": storable(answer.reason)}))

    async def checked(self, guid: str, url_hash: str, status: str, reason: str | None) -> MediaRow:
        return _row(await self._one("media_checked", {"guid": guid, "hash": url_hash, "status": status,
                                                      "reason": storable(reason)}))

    async def wait(self, cmd: ItemCommand, until: datetime, reason: str) -> bool:
        return await self._one("wait_item", {"item": cmd.item_id, "until": until,
                                             "reason": storable(reason)}) is not None

    async def fail_unsent(self, cmd: ItemCommand, error_class: str, reason: str) -> bool:
        return await PostgresGuidQueue(self.pool).fail_unsent(cmd, error_class, reason)
