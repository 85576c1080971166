"""Typed identifiers. ``NewType`` keeps a guid from being passed where a to_id belongs.

Every signature and model field in ``pacer_common.domain`` and the services' ``domain/`` that
holds one of these ids uses its type; adapters and the HTTP API wrap a value read from
outside (``Guid(row["guid"])``) where it enters a domain call. Shard ids are plain ``int``
(database serials, never confused with another id of the same type)."""

from __future__ import annotations

import os
import uuid
from datetime import datetime
from typing import NewType

JobId = NewType("JobId", str)
ItemId = NewType("ItemId", str)
Guid = NewType("Guid", str)
ToId = NewType("ToId", str)
RequestId = NewType("RequestId", str)
IdemKey = NewType("IdemKey", str)

_JOB_NAMESPACE = uuid.UUID("6b1f4a2e-4f7e-4d5e-9a55-1c0b8f3e2a10")


def job_id_for(request_id: RequestId) -> JobId:
    """A job's id is derived from its request id, so a re-published request maps to the same job."""
    return JobId(str(uuid.uuid5(_JOB_NAMESPACE, request_id)))


def new_item_ids(n: int, at: datetime) -> list[ItemId]:
    """``n`` time-ordered (version 7) UUIDs stamped with ``at``, their job's creation time, from
    one read of the OS's random source (a quarter of the cost of ``uuid4()`` per id, which
    shows when a job has a million items).

    The first 48 bits are ``at`` in Unix milliseconds, so every item of a job falls in the
    time partition of the job's creation (``items``, ``item_events`` and ``send_ledger`` are
    partitioned by ranges of item id: docs/architecture.md, "Time partitions"); the other 74
    bits are random, as in a version 4 UUID less four bits. ``pacer_item_id`` makes the same
    ids in SQL."""
    ms = int(at.timestamp() * 1000).to_bytes(6, "big").hex()
    raw = bytearray(os.urandom(10 * n))
    raw[0::10] = bytes((b & 0x0F) | 0x70 for b in raw[0::10])  # version 7
    raw[2::10] = bytes((b & 0x3F) | 0x80 for b in raw[2::10])  # RFC 9562 variant
    h = raw.hex()
    return [ItemId(f"{ms[:8]}-{ms[8:]}-{h[i:i + 4]}-{h[i + 4:i + 8]}-{h[i + 8:i + 20]}")
            for i in range(0, 20 * n, 20)]

