"""Which open shards are stalled, and which only wait for their guid's limits.

A shard of a running job whose guid is neither paused nor out has made no progress for
``stall_after_s``. That is a stall only if the guid's own limits would have let it send: not
inside its quiet hours, no send window whose batch share is used up, and longer than the
guid's own longest gap between two batch sends (or the shard's job's own interval, when
longer) beyond ``stall_after_s``: a guid paced at one send an hour waits an hour between
sends. The limits are the guid's overrides (``guid_limits``) over every guid's (``*``) over
the defaults of the sender holding its lease (``sender_limits``: its own settings); the gap
is stretched by the guid's rate-limit penalty as its lease row keeps it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pacer_common.domain.limits import Pacings


@dataclass(frozen=True)
class Quiet:
    """The open shards of one guid that have not moved for ``stall_after_s``."""

    guid: str
    since: Sequence[datetime]  # each shard's last progress (or creation)
    limits: Any  # the guid's own overrides (a mapping, as stored)
    windows: Mapping[str, Any] | None  # its send windows, as guid_leases keeps them
    job_gaps: Sequence[float] = ()  # each shard's job's own interval per guid (0: none)
    sender: Any = None  # the defaults of the sender holding the guid (sender_limits), if known
    penalty: float = 1.0  # its rate-limit penalty (guid_leases.penalty; 1: none)


def stalled(quiet: Iterable[Quiet], pacings: Pacings, now: datetime, stall_after_s: float) -> int:
    """How many of these shards are stalled rather than waiting for their guid's limits
    (``pacings``: over every guid's overrides, ``*``)."""
    n = 0
    for q in quiet:
        pacing = pacings(q.limits, q.sender)
        gaps = list(q.job_gaps) + [0.0] * (len(q.since) - len(q.job_gaps))
        n += sum(1 for t, job_gap in zip(q.since, gaps, strict=True)
                 if pacing.stalled(t, now, stall_after_s, q.windows, job_gap, q.penalty))
    return n
