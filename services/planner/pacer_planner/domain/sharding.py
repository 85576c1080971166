"""Shards: a guid's part of a job, split into ``subs`` sub-shards when it is very long.

A shard is (job, guid, sub). A guid with more than ``max_items`` items in one job is split
into ``ceil(n / max_items)`` sub-shards, and each target goes to ``crc32(to_id) % subs``.
The hash is CRC-32 of the UTF-8 bytes: the same in every process and every release, unlike
Python's salted ``hash()``, so a target's sub can be recomputed anywhere, at any time.
The split is by hash, so sub-shards are about equal, not capped exactly at ``max_items``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

from pacer_common.domain.ids import Guid, ToId

# (guid, sub): the identity of a shard within a job.
ShardKey = tuple[Guid, int]

DEFAULT_MAX_SHARD_ITEMS = 50_000


def target_hash(to_id: ToId) -> int:
    """A stable, unsigned 32-bit hash of a target's ``to_id``."""
    return zlib.crc32(to_id.encode("utf-8"))


def sub_count(n: int, max_items: int) -> int:
    """How many sub-shards ``n`` items of one guid are split into: ``ceil(n / max_items)``, at least 1."""
    if max_items < 1:
        raise ValueError(f"max_items must be at least 1, got {max_items}")
    return max(1, -(-n // max_items))


def sub_of(to_id: ToId, subs: int) -> int:
    """The sub-shard of a target among ``subs``."""
    return 0 if subs <= 1 else target_hash(to_id) % subs


def sub_counts(per_guid: Mapping[Guid, int], max_items: int) -> dict[Guid, int]:
    """The sub count of each guid, from its number of items."""
    return {guid: sub_count(n, max_items) for guid, n in per_guid.items()}


def per_guid(keys: Iterable[Guid]) -> dict[Guid, int]:
    """How many times each guid occurs, in first-seen order."""
    counts: dict[Guid, int] = {}
    for guid in keys:
        counts[guid] = counts.get(guid, 0) + 1
    return counts
