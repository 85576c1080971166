"""A guid's lifecycle (seed 004): ``online`` sends; ``offline``, ``kicked`` and
``unauthorized`` hold the guid's whole queue until it is ``online`` again. Pacer never
replaces a guid; it waits for its own account to come back.

States are learned from ``device.status`` callbacks, from send failures (the gateway codes
that mean one of these states) and from operators. Callbacks may come twice, late or out of
order, so an event carries the moment it describes (``ts``) and applies only when it is
newer than the newest event applied so far: an older event never overrides a newer state,
and a repeated one changes nothing. The stored function ``pacer_set_guid_state`` applies
the same rule atomically; an integration test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Literal


class GuidState(StrEnum):
    ONLINE = "online"
    OFFLINE = "offline"
    KICKED = "kicked"
    UNAUTHORIZED = "unauthorized"


HOLDING = frozenset({GuidState.OFFLINE, GuidState.KICKED, GuidState.UNAUTHORIZED})
Source = Literal["callback", "send_failure", "operator"]

# Gateway codes of a needs-human answer → the state they mean (configuration overrides it:
# PACER_SENDER_GUID_STATE_CODES). A needs-human code missing here means ``offline``.
DEFAULT_STATE_CODES: dict[int, GuidState] = {
    1001: GuidState.OFFLINE,
    1002: GuidState.KICKED,
    1003: GuidState.UNAUTHORIZED,
}


def state_for_code(code: int | None, table: Mapping[int, GuidState]) -> GuidState:
    """The lifecycle state a needs-human gateway answer puts its guid in."""
    return table.get(code, GuidState.OFFLINE) if code is not None else GuidState.OFFLINE


@dataclass(frozen=True)
class StatusEvent:
    state: GuidState
    ts: datetime  # the moment the event describes (the callback's ``ts``; when a refused call began)
    source: Source
    reason: str | None = None


@dataclass(frozen=True)
class GuidHealth:
    state: GuidState
    event_ts: datetime  # the newest event applied, whatever its state
    source: Source
    reason: str | None
    changes: int = 1


def apply(current: GuidHealth | None, event: StatusEvent) -> tuple[GuidHealth, bool]:
    """The guid's health after ``event``, and whether its state changed."""
    if current is None:
        return GuidHealth(event.state, event.ts, event.source, event.reason), True
    if event.ts <= current.event_ts:
        return current, False  # late, repeated or reordered: a newer event already spoke
    if event.state is current.state:
        return replace(current, event_ts=event.ts), False
    return GuidHealth(event.state, event.ts, event.source, event.reason, current.changes + 1), True


def holds(health: GuidHealth | None) -> bool:
    """Whether the guid's queue is held (a guid never heard of sends)."""
    return health is not None and health.state in HOLDING
