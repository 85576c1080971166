"""The job request contract (Kafka ``pacer.job-requests``), validated with pydantic.

The JSON Schema published at ``schemas/job-request.schema.json`` is generated from
:class:`JobRequest` (``pacer schema``); a test keeps the two equal.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

NonEmpty = Annotated[str, Field(min_length=1, max_length=256)]


class JobKind(StrEnum):
    TAKEOVER_PROMPT = "takeover_prompt"
    AUTO_REPLY = "auto_reply"
    TICKET_NOTIFY = "ticket_notify"
    CAMPAIGN = "campaign"


# Lower number = more urgent. A kind sets the default; a request may override it.
DEFAULT_PRIORITY: dict[JobKind, int] = {
    JobKind.TAKEOVER_PROMPT: 0,
    JobKind.AUTO_REPLY: 1,
    JobKind.TICKET_NOTIFY: 2,
    JobKind.CAMPAIGN: 3,
}


# Takeover prompts and auto-replies travel in the online lane; everything else in batch.
ONLINE_MAX_PRIORITY = 1
LANES = ("online", "batch")


def lane_of(priority: int) -> str:
    return "online" if priority <= ONLINE_MAX_PRIORITY else "batch"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Message(_Model):
    type: Literal["text"] = "text"
    content: Annotated[str, Field(min_length=1, max_length=4096)]


class Target(_Model):
    guid: NonEmpty
    to_id: NonEmpty
    vars: dict[str, str] = Field(default_factory=dict)


class SnapshotTargets(_Model):
    mode: Literal["snapshot"] = "snapshot"
    items: Annotated[list[Target], Field(min_length=1, max_length=2_000_000)]


class Budget(_Model):
    max_sends: Annotated[int, Field(gt=0)]


class JobRequest(_Model):
    """One submitted request. Fields may be added; unknown fields are refused."""

    request_id: NonEmpty
    kind: JobKind
    created_by: NonEmpty
    message: Message
    content_version: Annotated[int, Field(ge=0)] = 0
    targets: SnapshotTargets
    expire_at: AwareDatetime | None = None
    not_before: AwareDatetime | None = None
    priority: Annotated[int, Field(ge=0, le=9)] | None = None
    budget: Budget | None = None
    # auto_reply: the customer's message being answered (idempotency: guid + uid).
    source_msg_uid: NonEmpty | None = None
    # ticket_notify: business id and status version (idempotency and coalescing).
    business_id: NonEmpty | None = None
    status_version: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _kind_fields(self) -> JobRequest:
        if self.kind is JobKind.AUTO_REPLY and self.source_msg_uid is None:
            raise ValueError("kind 'auto_reply' needs 'source_msg_uid' (the message being answered)")
        if self.kind is JobKind.TICKET_NOTIFY and (
            self.business_id is None or self.status_version is None
        ):
            raise ValueError("kind 'ticket_notify' needs 'business_id' and 'status_version'")
        if self.expire_at and self.not_before and self.not_before >= self.expire_at:
            raise ValueError("'not_before' must be earlier than 'expire_at'")
        return self

    @property
    def effective_priority(self) -> int:
        return self.priority if self.priority is not None else DEFAULT_PRIORITY[self.kind]


def expired(expire_at: datetime | None, now: datetime) -> bool:
    return expire_at is not None and now >= expire_at
