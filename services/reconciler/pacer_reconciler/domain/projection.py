"""Fold a batch of events into per-shard status count changes, and what to re-dispatch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pacer_common.domain.events import ItemEvent
from pacer_common.domain.status import ItemStatus


def count_deltas(events: Iterable[ItemEvent]) -> dict[tuple[int, ItemStatus], int]:
    """Each transition moves one item of its shard from one status count to another. In key
    order (shard, then status): the order the counts' rows are written and locked in, the
    order a retry takes them in too, so that the two never wait for each other in a circle."""
    deltas: Counter[tuple[int, ItemStatus]] = Counter()
    for ev in events:
        deltas[(ev.shard_id, ev.from_status)] -= 1
        deltas[(ev.shard_id, ev.to_status)] += 1
    return {k: v for k, v in sorted(deltas.items()) if v}


def to_dispatch(events: Iterable[ItemEvent]) -> list[str]:
    """Items put back to pending by this batch: each needs an item command again."""
    return list(dict.fromkeys(ev.item_id for ev in events if ev.to_status is ItemStatus.PENDING))
