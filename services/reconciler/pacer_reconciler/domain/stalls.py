"""Which open shards are stalled, and which only wait for their guid's limits.

A shard of a running job whose guid is neither paused nor out has made no progress for
``stall_after_s``. That is a stall only if the guid's own limits would have let it send: not
inside its quiet hours, no send window whose batch share is used up, and longer than the
guid's own longest gap between two batch sends beyond ``stall_after_s`` (a guid paced at one
send an hour waits an hour between sends). The limits are the ones every sender applies: the
guid's overrides over every guid's (``*``); a rate-limit penalty lives only in the sender
holding the guid and is not seen here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pacer_common.domain.limits import effective_pacing


@dataclass(frozen=True)
class Quiet:
    """The open shards of one guid that have not moved for ``stall_after_s``."""

    guid: str
    since: Sequence[datetime]  # each shard's last progress (or creation)
    limits: Mapping[str, Any] | None  # the guid's own overrides
    windows: Mapping[str, Any] | None  # its send windows, as guid_leases keeps them


def stalled(quiet: Iterable[Quiet], every_guid: Mapping[str, Any] | None, now: datetime,
            stall_after_s: float) -> int:
    """How many of these shards are stalled rather than waiting for their guid's limits."""
    n = 0
    wall = now.timestamp()
    for q in quiet:
        pacing = effective_pacing(every_guid, q.limits)
        if pacing.held_for(wall, q.windows) > 0:
            continue
        limit = stall_after_s + pacing.longest_gap_s
        n += sum(1 for t in q.since if (now - t).total_seconds() > limit)
    return n
