"""What the sender needs from the outside world."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.receipts import Receipt
from pacer_sender.domain.decisions import Decision


@dataclass(frozen=True)
class Claim:
    epoch: int
    attempts: int


BeginResult = Literal["submitted", "duplicate", "fenced"]


class ItemRepository(Protocol):
    async def expire(self, cmd: ItemCommand) -> bool: ...
    async def claim(self, cmd: ItemCommand, owner: str) -> Claim | None: ...
    async def begin_send(self, cmd: ItemCommand, claim: Claim) -> BeginResult: ...
    async def confirm(self, cmd: ItemCommand, claim: Claim, receipt: Receipt) -> bool: ...
    async def settle(self, cmd: ItemCommand, claim: Claim, decision: Decision) -> bool: ...


class Gateway(Protocol):
    async def send_text(self, guid: str, to_id: str, content: str, idem_key: str) -> Receipt: ...
