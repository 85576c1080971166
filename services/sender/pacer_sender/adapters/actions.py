"""Jobs' messages, the guids' uploaded media (``media``) and Pacer's copy of customers (``customers``), on Postgres."""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from pydantic import TypeAdapter

from pacer_common.db.errors import with_retry
from pacer_common.db.pool import Pool
from pacer_common.db.sql import loader
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.customers import Customer
from pacer_common.domain.guid_health import GuidState
from pacer_common.domain.requests import AnyMessage, MediaMessage, Message, TextMessage
from pacer_common.gateway import MediaAnswer
from pacer_sender.adapters.postgres import storable
from pacer_sender.adapters.queue import PostgresGuidQueue
from pacer_sender.domain.media import MediaRow
from pacer_sender.ports import Begun

_sql = loader("pacer_sender.adapters.sql")
_message: TypeAdapter[AnyMessage] = TypeAdapter(Message)


def _row(r: Any) -> MediaRow:
    return MediaRow(r["media_id"], r["status"], r["reason"], r["uploaded_at"], r["checked_at"], r["generation"])


class PostgresActions:
    def __init__(self, pool: Pool, cache_jobs: int = 4096) -> None:
        self.pool = pool
        self._messages: OrderedDict[str, AnyMessage] = OrderedDict()  # a job's message never changes
        self.cache_jobs = cache_jobs

    async def _one(self, name: str, params: dict[str, Any]) -> Any:
        """The statement's row, or None."""
        async def work() -> Any:
            async with self.pool.connection() as conn:
                return await (await conn.execute(_sql(name), params)).fetchone()

        return await with_retry(work)

    async def message_of(self, job_id: str) -> AnyMessage:
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

    async def uploaded(self, guid: str, url_hash: str, msg: MediaMessage, answer: MediaAnswer,
                       generation: int) -> MediaRow:
        return _row(await self._one("media_uploaded", {
            "guid": guid, "hash": url_hash, "url": msg.url, "kind": msg.type, "file_name": msg.fileName,
            "media_id": answer.media_id, "status": answer.status, "reason": storable(answer.reason),
            "generation": generation}))

    async def checked(self, guid: str, url_hash: str, media_id: str, status: str,
                      reason: str | None) -> MediaRow | None:
        r = await self._one("media_checked", {"guid": guid, "hash": url_hash, "media_id": media_id,
                                              "status": status, "reason": storable(reason)})
        return None if r is None else _row(r)

    async def media_refused(self, guid: str, url_hash: str, media_id: str, reason: str) -> bool:
        return await self._one("media_refused", {"guid": guid, "hash": url_hash, "media_id": media_id,
                                                 "reason": storable(reason)}) is not None

    async def sent_back_for_media(self, item_id: str) -> bool:
        return bool((await self._one("media_sent_back", {"item": item_id}))["sent_back"])

    async def hold(self, cmd: ItemCommand) -> Begun | None:
        r = await self._one("hold_item", {"item": cmd.item_id})
        if r is None or r["outcome"] is None:
            return None
        return Begun(r["outcome"], None, None, r["holder"])

    async def wait(self, cmd: ItemCommand, until: datetime, reason: str) -> bool:
        return await self._one("wait_item", {"item": cmd.item_id, "until": until,
                                             "reason": storable(reason)}) is not None

    async def fail_unsent(self, cmd: ItemCommand, error_class: str, reason: str) -> bool:
        return await PostgresGuidQueue(self.pool).fail_unsent(cmd, error_class, reason)

    async def save_customer(self, customer: Customer, item_id: str) -> int | None:
        row = await self._one("save_customer", {
            "id": customer.customer_id, "name": customer.name, "remark": customer.remark,
            "tags": Jsonb(customer.tags), "version": customer.version, "item": item_id})
        if row["written"] is not None:
            return None
        # Refused: read the version that refused it afresh (this statement's snapshot may predate it).
        row = await self._one("customer_version", {"id": customer.customer_id})
        return int(row["held"])

    async def guid_state(self, guid: str, state: GuidState, reason: str, at: datetime) -> None:
        await self._one("guid_state", {"guid": guid, "state": state.value, "reason": storable(reason), "at": at})
