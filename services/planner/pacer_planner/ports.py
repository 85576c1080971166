"""What the planner needs from the outside world."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pacer_common.domain.commands import ItemCommand
from pacer_planner.domain.planning import Plan


@dataclass(frozen=True)
class Stored:
    """Result of storing a plan: whether the job is new, and whether its commands went out."""

    job_id: str
    created: bool
    dispatched: bool
    shard_ids: dict[str, int]  # guid → shard id


class JobStore(Protocol):
    async def store(self, plan: Plan) -> Stored: ...
    async def pending_commands(self, job_id: str) -> Sequence[ItemCommand]: ...
    async def mark_dispatched(self, job_id: str) -> None: ...
    async def queued(self, guids: Sequence[str]) -> dict[str, int]: ...
    async def exists(self, request_id: str) -> bool: ...


class CommandBus(Protocol):
    def dispatch(self, commands: Sequence[ItemCommand]) -> int: ...
    def dead_letter(self, key: bytes | None, value: bytes, reason: str) -> None: ...
