"""The order in which a guid's ready work is sent, stated once in Python.

``adapters/sql/next_ready.sql`` applies the same rule to all of a guid's ready work in
Postgres (an integration test keeps the two equal); the in-memory window (``queue.py``)
follows it for the few items it holds.

1. priority (the online lane's priorities come first);
2. within a priority, fair share across jobs — start-time fair queuing: the k-th ready item
   (from 0) of job J starts at virtual time ``k / weight(J)``, lowest first, so jobs of
   equal weight take turns and a job of weight 2 sends two items for one;
3. then the moment the item became ready (``not_before``, else its creation), then its id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pacer_common.domain.ids import ItemId, JobId
from pacer_sender.domain.pacing import Drain

MIN_WEIGHT = 0.001  # a weight of 0 or less would starve a job for ever: it counts as this


@dataclass(frozen=True)
class Queued:
    item_id: ItemId
    job_id: JobId
    priority: int
    ready_at: float  # epoch seconds


def weight_of(value: float | None) -> float:
    return max(MIN_WEIGHT, 1.0 if value is None else value)


def fair_order(items: Iterable[Queued], weight: Callable[[JobId], float | None] = lambda job: None) -> list[Queued]:
    """``items`` in the order they are to be sent."""
    by_pair: dict[tuple[int, JobId], list[Queued]] = {}
    for q in items:
        by_pair.setdefault((q.priority, q.job_id), []).append(q)
    keyed = []
    for (priority, job), group in by_pair.items():
        w = weight_of(weight(job))
        for k, q in enumerate(sorted(group, key=lambda q: (q.ready_at, q.item_id))):
            keyed.append(((priority, k / w, q.ready_at, q.item_id), q))
    return [q for _, q in sorted(keyed, key=lambda kq: kq[0])]


def sheds(position: int, expire_at: float | None, now: float, drain: Drain) -> bool:
    """Shedding: whether the batch item at ``position`` (from 1) in its guid's send order
    cannot go out before its ``expire_at`` at the guid's current pace: it would go out at about
    ``now + drain.at(position)``. ``adapters/sql/shed.sql`` applies the same test to a guid's
    whole batch queue."""
    return expire_at is not None and now + drain.at(position) > expire_at
