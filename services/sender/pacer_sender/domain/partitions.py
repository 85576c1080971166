"""Which partition of an item-command topic carries a guid's commands.

Producers of item commands (planner, reconciler) key them by guid with librdkafka's
``consistent_random`` partitioner (``pacer_common.kafka.make_producer`` sets it
explicitly): CRC32 of the key, modulo the topic's partition count. The sender uses the same
function to tell which guids of the queue in Postgres are its own.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from pacer_common.domain.ids import Guid


def partition_of(guid: Guid, partitions: int) -> int:
    return zlib.crc32(guid.encode()) % partitions


# Postgres indexes the queued guids by their CRC modulo this (``items_guid_queued_bucket``):
# 2^7 · 3^2 · 5, a multiple of every partition count up to 6, of 8, 9, 10, 12, 15, 16, 18, 20,
# 24, 30, 32, 36, 40, 45, 48, 60, 64, 72, 80, 90, 96, 120, 128 and more. A guid is in
# partition p of n exactly when its bucket b has b mod n = p, whenever n divides this.
GUID_BUCKETS = 5760


def buckets_of(owned: Iterable[tuple[int, int]], buckets: int = GUID_BUCKETS) -> list[int] | None:
    """The buckets whose guids are those of the (partition count, partition) pairs ``owned``,
    in order, each once; None when a count does not divide ``buckets`` (then no set of buckets
    is exactly a partition's guids)."""
    found: set[int] = set()
    for n, p in owned:
        if n <= 0 or buckets % n:
            return None
        found.update(range(p % n, buckets, n))
    return sorted(found)
