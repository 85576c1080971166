"""Item commands (Kafka ``pacer.item-commands``, key = guid): one send for a sender to execute."""

from __future__ import annotations

from pydantic import AwareDatetime, BaseModel, ConfigDict

SCHEMA_VERSION = 1


class ItemCommand(BaseModel):
    """Everything a sender needs to execute one item without reading the job."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: int = SCHEMA_VERSION
    item_id: str
    job_id: str
    shard_id: int
    guid: str
    to_id: str
    content: str
    idem_key: str
    priority: int
    kind: str
    expire_at: AwareDatetime | None = None
    not_before: AwareDatetime | None = None
