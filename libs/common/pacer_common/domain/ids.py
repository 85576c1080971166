"""Typed identifiers. ``NewType`` keeps a guid from being passed where a to_id belongs.

Every signature and model field in ``pacer_common.domain`` and the services' ``domain/`` that
holds one of these ids uses its type; adapters and the HTTP API wrap a value read from
outside (``Guid(row["guid"])``) where it enters a domain call. Shard ids are plain ``int``
(database serials, never confused with another id of the same type)."""

from __future__ import annotations

import os
import uuid
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


def new_item_ids(n: int) -> list[ItemId]:
    """``n`` random (version 4) UUIDs, as ``uuid4()`` makes, from one read of the OS's random
    source: a quarter of the cost per id, which shows when a job has a million items."""
    raw = bytearray(os.urandom(16 * n))
    raw[6::16] = bytes((b & 0x0F) | 0x40 for b in raw[6::16])  # version 4
    raw[8::16] = bytes((b & 0x3F) | 0x80 for b in raw[8::16])  # RFC 4122 variant
    h = raw.hex()
    return [ItemId(f"{h[i:i + 8]}-{h[i + 8:i + 12]}-{h[i + 12:i + 16]}-{h[i + 16:i + 20]}-{h[i + 20:i + 32]}")
            for i in range(0, 32 * n, 32)]
