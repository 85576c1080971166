"""Which partition of an item-command topic carries a guid's commands.

Producers of item commands (planner, reconciler) key them by guid with librdkafka's
``consistent_random`` partitioner (``pacer_common.kafka.make_producer`` sets it
explicitly): CRC32 of the key, modulo the topic's partition count. The sender uses the same
function to tell which guids of the queue in Postgres are its own.
"""

from __future__ import annotations

import zlib

from pacer_common.domain.ids import Guid


def partition_of(guid: Guid, partitions: int) -> int:
    return zlib.crc32(guid.encode()) % partitions
