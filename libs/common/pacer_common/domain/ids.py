"""Typed identifiers. ``NewType`` keeps a guid from being passed where a to_id belongs."""

from __future__ import annotations

import uuid
from typing import NewType

JobId = NewType("JobId", str)
ItemId = NewType("ItemId", str)
ShardId = NewType("ShardId", int)
Guid = NewType("Guid", str)
ToId = NewType("ToId", str)
RequestId = NewType("RequestId", str)
IdemKey = NewType("IdemKey", str)

_JOB_NAMESPACE = uuid.UUID("6b1f4a2e-4f7e-4d5e-9a55-1c0b8f3e2a10")


def job_id_for(request_id: str) -> JobId:
    """A job's id is derived from its request id, so a re-published request maps to the same job."""
    return JobId(str(uuid.uuid5(_JOB_NAMESPACE, request_id)))


def new_item_id() -> ItemId:
    return ItemId(str(uuid.uuid4()))
