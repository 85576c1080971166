"""Scripted stand-ins for the sender's action ports (``ActionStore``, ``ActionGateway``), for
tests of how a media step's or a customer sync's answer is classified and paced: every call
recorded, each answer or error as the test scripts it. (``fakes.py`` holds the stand-ins with
the guards of the real adapters.)"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.customers import Customer
from pacer_common.domain.failures import SendError
from pacer_common.domain.guid_health import GuidState
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.requests import AnyMessage, MediaMessage
from pacer_common.gateway import MediaAnswer
from pacer_sender.domain.media import MediaRow
from pacer_sender.ports import Begun


class ScriptedActions:
    """One job's message; media records by (guid, hash), the first look finding ``media`` if
    given; items kept waiting; customers saved. ``save_error``: raised by the next
    ``save_customer`` (the database away, say)."""

    def __init__(self, message: AnyMessage, media: MediaRow | None = None) -> None:
        self.message = message
        self.rows: dict[tuple[str, str], MediaRow] = {}
        self.first_media = media
        self.waits: list[tuple[str, datetime, str]] = []
        self.failed: list[tuple[str, str, str]] = []
        self.customers: list[Customer] = []
        self.save_error: Exception | None = None

    async def message_of(self, job_id: str) -> AnyMessage:
        return self.message

    async def media(self, guid: str, url_hash: str) -> MediaRow | None:
        return self.rows.get((guid, url_hash), self.first_media)

    async def uploaded(self, guid: str, url_hash: str, msg: MediaMessage, answer: MediaAnswer,
                       generation: int) -> MediaRow:
        row = self.rows[guid, url_hash] = MediaRow(answer.media_id, answer.status,  # type: ignore[arg-type]  # the gateway's word
                                                   answer.reason, datetime.now(UTC), None, generation)
        return row

    async def checked(self, guid: str, url_hash: str, media_id: str, status: str,
                      reason: str | None) -> MediaRow | None:
        row = self.rows.get((guid, url_hash), self.first_media)
        if row is None or row.media_id != media_id:
            return None
        row = self.rows[guid, url_hash] = MediaRow(media_id, status, reason,  # type: ignore[arg-type]  # as above
                                                   row.uploaded_at, datetime.now(UTC), row.generation)
        return row

    async def media_refused(self, guid: str, url_hash: str, media_id: str, reason: str) -> bool:
        return False

    async def sent_back_for_media(self, item_id: str) -> bool:
        return False

    async def hold(self, cmd: ItemCommand) -> Begun | None:
        return None  # nothing holds the item

    async def wait(self, cmd: ItemCommand, until: datetime, reason: str) -> bool:
        self.waits.append((cmd.item_id, until, reason))
        return True

    async def fail_unsent(self, cmd: ItemCommand, error_class: str, reason: str) -> bool:
        self.failed.append((cmd.item_id, error_class, reason))
        return True

    async def guid_state(self, guid: str, state: GuidState, reason: str, at: datetime) -> None:
        raise AssertionError(f"guid {guid} taken out ({state}): not expected here")

    async def save_customer(self, customer: Customer, item_id: str) -> int | None:
        if self.save_error is not None:
            err, self.save_error = self.save_error, None
            raise err
        self.customers.append(customer)
        return None


class ScriptedActionGateway:
    """Each call recorded in ``calls``; it raises the next of ``errors`` if any, else answers:
    a media ``status`` (``pending`` by default), a receipt, or ``customer``."""

    def __init__(self, errors: list[SendError] | None = None, status: str = "pending",
                 customer: Customer | None = None) -> None:
        self.errors = list(errors or [])
        self.status = status
        self.customer = customer or Customer(customer_id="c-1", name="A", version=1)
        self.calls: list[str] = []

    def _next(self, call: str) -> None:
        self.calls.append(call)
        if self.errors:
            raise self.errors.pop(0)

    async def send_media(self, kind: str, guid: str, to_id: str, media_id: str, idem_key: str,
                         deadline: float | None = None, tenant: str = "default") -> Receipt:
        self._next("send_media")
        return Receipt(0, "ok", "msg-media", 1.0)

    async def upload_media(self, guid: str, url: str, kind: str, file_name: str | None,
                           idem_key: str, tenant: str = "default") -> MediaAnswer:
        self._next("upload")
        return MediaAnswer("m-1", self.status, None, 1.0)

    async def media_status(self, guid: str, media_id: str, tenant: str = "default") -> MediaAnswer:
        self._next("status")
        return MediaAnswer(media_id, self.status, None, 1.0)

    async def customer_tags(self, op: str, guid: str, customer_id: str, tag_ids: Sequence[str], idem_key: str,
                            deadline: float | None = None, tenant: str = "default") -> Receipt:
        self._next("tags")
        return Receipt(0, "ok", None, 1.0)

    async def customer_detail(self, guid: str, customer_id: str, idem_key: str,
                              deadline: float | None = None, tenant: str = "default") -> tuple[Receipt, Customer]:
        self._next("customer_detail")
        return Receipt(0, "ok", None, 1.0), self.customer
