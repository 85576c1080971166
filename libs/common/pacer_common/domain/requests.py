"""The job request contract (Kafka ``pacer.job-requests``), validated with pydantic.

The JSON Schema published at ``schemas/job-request.schema.json`` is generated from
:class:`JobRequest` (``pacer schema``); a test keeps the two equal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    HttpUrl,
    StringConstraints,
    Tag,
    model_validator,
)

from pacer_common.domain.ids import Guid, RequestId, ToId

# Every bound below is one a store or a transport has: Postgres text cannot hold NUL (and
# the JSON parser refuses lone surrogates), integer columns are 32-bit, an indexed text
# value must fit a btree row (~2700 bytes: 256 characters are at most 1024 bytes), and a
# message must fit the gateway and a Kafka record. A request past one is refused with the
# reason instead of failing in the database (see ``validation``).
NO_NUL = r"^[^\x00]*$"
INT4_MAX = 2**31 - 1
MAX_ID_CHARS = 256
MAX_TEMPLATE_CHARS = 4096
MAX_VARS = 64
MAX_VAR_NAME_CHARS = 128
MAX_VAR_VALUE_CHARS = 4096
MAX_SNAPSHOT_TARGETS = 2_000_000
MAX_REQUEST_BYTES = 64 * 1024 * 1024  # the largest job request, as Kafka carries it
# Instants Postgres and Python can both hold in any time zone: stored and read back safely.
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC)

NonEmpty = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS, pattern=NO_NUL)]
_ID = StringConstraints(min_length=1, max_length=MAX_ID_CHARS, pattern=NO_NUL)
VarName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_VAR_NAME_CHARS, pattern=NO_NUL)]
VarValue = Annotated[str, StringConstraints(max_length=MAX_VAR_VALUE_CHARS, pattern=NO_NUL)]
Vars = Annotated[dict[VarName, VarValue], Field(max_length=MAX_VARS)]
Int4 = Annotated[int, Field(ge=0, le=INT4_MAX)]
# A tenant's name, as the ``tenants`` table's CHECK constraint has it (migrations/0023_tenants.sql).
TENANT_NAME = r"^[a-z0-9][a-z0-9_-]{0,62}$"
TenantName = Annotated[str, StringConstraints(pattern=TENANT_NAME)]
DEFAULT_TENANT = "default"


def _storable_instant(value: datetime) -> datetime:
    try:
        storable = EARLIEST <= value.astimezone(UTC) < LATEST
    except OverflowError:  # past year 1 or 9999 once moved to UTC
        storable = False
    if not storable:
        raise ValueError(f"must be between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} (UTC)")
    return value


Instant = Annotated[AwareDatetime, AfterValidator(_storable_instant)]


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
Lane = Literal["online", "batch"]
LANES: tuple[Lane, ...] = ("online", "batch")


def lane_of(priority: int) -> Lane:
    return "online" if priority <= ONLINE_MAX_PRIORITY else "batch"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextMessage(_Model):
    type: Literal["text"] = "text"
    content: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEMPLATE_CHARS, pattern=NO_NUL)]


MediaKind = Literal["image", "file", "video"]
MAX_URL_CHARS = 2048


class MediaMessage(_Model):
    """An image, file or video, sent by ``mediaId`` once the gateway has it ready: uploaded
    once per distinct ``url`` per guid (not per target), then sent to every target."""

    type: MediaKind
    url: Annotated[str, StringConstraints(min_length=8, max_length=MAX_URL_CHARS, pattern=r"^https?://[^\s\x00]+$")]
    fileName: Annotated[str, StringConstraints(
        min_length=1, max_length=255, pattern=NO_NUL)] | None = None

    @property
    def content(self) -> str:
        """What each item stores as its content (the console shows it): the kind and the name."""
        return f"[{self.type}] {self.fileName or self.url}"


TagId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=NO_NUL)]


class TagsMessage(_Model):
    """Add tags to, or remove them from, each target's customer (the target's ``to_id`` is the
    ``customerId``). Idempotent: adding a tag held, or removing one not held, changes nothing."""

    type: Literal["tags.add", "tags.remove"]
    tagIds: Annotated[list[TagId], Field(min_length=1, max_length=100)]

    @property
    def content(self) -> str:
        return f"[{self.type}] {','.join(self.tagIds)}"


class SyncMessage(_Model):
    """Read each target's customer (``to_id`` = ``customerId``) from the gateway into Pacer's
    copy (``customers``), under a version check: the newest version wins, a sync that read an
    older or the same version changes nothing."""

    type: Literal["customer.sync"]

    @property
    def content(self) -> str:
        return "[customer.sync]"


MESSAGE_TAGS = {"image": "media", "file": "media", "video": "media", "tags.add": "tags", "tags.remove": "tags",
                "customer.sync": "sync"}


def _message_type(value: Any) -> Any:
    # ``type`` may be left out of a text message, as it always could.
    if isinstance(value, dict):
        kind = value.get("type", "text")
        return MESSAGE_TAGS.get(kind, kind) if isinstance(kind, str) else kind
    tags: dict[type, str] = {MediaMessage: "media", TagsMessage: "tags", SyncMessage: "sync"}
    return tags.get(type(value), "text")


Message = Annotated[
    Annotated[TextMessage, Tag("text")] | Annotated[MediaMessage, Tag("media")]
    | Annotated[TagsMessage, Tag("tags")] | Annotated[SyncMessage, Tag("sync")],
    Discriminator(_message_type, custom_error_type="message_type",
                  custom_error_message="'type' must be 'text', 'image', 'file', 'video', 'tags.add', 'tags.remove' "
                                       "or 'customer.sync'"),
]
AnyMessage = TextMessage | MediaMessage | TagsMessage | SyncMessage


class Target(_Model):
    guid: Annotated[Guid, _ID]
    to_id: Annotated[ToId, _ID]
    vars: Vars = Field(default_factory=dict)


class SnapshotTargets(_Model):
    """Every target in the request itself; the set is frozen when the job is created."""

    mode: Literal["snapshot"] = "snapshot"
    items: Annotated[list[Target], Field(min_length=1, max_length=MAX_SNAPSHOT_TARGETS)]


REQUERY_PAGE_SIZE_MAX = 5000


class RequeryTargets(_Model):
    """The audience is fetched by the planner, page by page: ``GET <url>?cursor=<c>&limit=<n>``
    answering ``{"items": [Target, ...], "next_cursor": "..." | null}``. ``vars`` are static
    template variables; a target's own vars win over them."""

    mode: Literal["requery"]
    url: HttpUrl
    page_size: Annotated[int, Field(ge=1, le=REQUERY_PAGE_SIZE_MAX)] = 500
    vars: Vars = Field(default_factory=dict)


def _target_mode(value: Any) -> Any:
    # ``mode`` may be left out of a snapshot, as it always could: requests written before
    # requery existed stay valid.
    if isinstance(value, dict):
        return value.get("mode", "snapshot")
    return getattr(value, "mode", None)


Targets = Annotated[
    Annotated[SnapshotTargets, Tag("snapshot")] | Annotated[RequeryTargets, Tag("requery")],
    Discriminator(_target_mode, custom_error_type="target_mode",
                  custom_error_message="'mode' must be 'snapshot' or 'requery'"),
]


class Budget(_Model):
    max_sends: Annotated[int, Field(gt=0, le=INT4_MAX)]


class JobRequest(_Model):
    """One submitted request. Fields may be added; unknown fields are refused."""

    request_id: Annotated[RequestId, _ID]
    kind: JobKind
    created_by: NonEmpty
    message: Message
    content_version: Int4 = 0
    targets: Targets
    expire_at: Instant | None = None
    not_before: Instant | None = None
    priority: Annotated[int, Field(ge=0, le=9)] | None = None
    budget: Budget | None = None
    # auto_reply: the customer's message being answered (idempotency: guid + uid).
    source_msg_uid: NonEmpty | None = None
    # ticket_notify: business id and status version (idempotency and coalescing).
    business_id: NonEmpty | None = None
    status_version: Int4 | None = None
    # The tenant (gateway token) whose gateway sends it; one that does not exist is dead-lettered.
    tenant: TenantName = DEFAULT_TENANT

    @model_validator(mode="after")
    def _kind_fields(self) -> JobRequest:
        if self.kind is JobKind.AUTO_REPLY and self.source_msg_uid is None:
            raise ValueError("kind 'auto_reply' needs 'source_msg_uid' (the message being answered)")
        if self.kind is JobKind.TICKET_NOTIFY and (
            self.business_id is None or self.status_version is None
        ):
            raise ValueError("kind 'ticket_notify' needs 'business_id' and 'status_version'")
        if self.kind is JobKind.TICKET_NOTIFY and self.targets.mode == "requery":
            # Coalescing supersedes a ticket's older items when the job is stored; items
            # arriving page by page afterwards would escape it.
            raise ValueError("kind 'ticket_notify' needs 'snapshot' targets, not 'requery'")
        if self.expire_at and self.not_before and self.not_before >= self.expire_at:
            raise ValueError("'not_before' must be earlier than 'expire_at'")
        return self

    @property
    def effective_priority(self) -> int:
        return self.priority if self.priority is not None else DEFAULT_PRIORITY[self.kind]


def expired(expire_at: datetime | None, now: datetime) -> bool:
    return expire_at is not None and now >= expire_at
