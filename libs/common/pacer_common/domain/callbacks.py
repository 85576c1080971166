"""Gateway callbacks Pacer acts on: one JSON body ``{"cmd", "guid", "ts", "data"}``
(DESIGN.md "Gateway contract, all actions", Callbacks; docs/architecture.md, "Callbacks").

Pacer itself acts on two commands (:data:`ACTED_ON`): ``device.status`` (a guid's
lifecycle) and ``media.ready`` (an uploaded media's readiness). Every other command is for
business consumers and is passed over here. This is the one reading of them: the intake
refuses (dead-letters, with the reason) one of these it could not act on, before it is
appended, and the reconciler acts on what it appended. A body that cannot be read is the
event's own fault: :class:`BadCallback` carries the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from pacer_common.domain.guid_health import GuidState, StatusEvent
from pacer_common.domain.requests import MAX_ID_CHARS, NO_NUL
from pacer_common.domain.validation import error_text, loc_part

MAX_REASON_CHARS = 500  # a gateway's reason, as stored
# A callback's guid: the bound of a guid a job names (a target's), so that every guid a job
# sends from can have its device.status and media.ready read; the intake refuses a longer one
# whatever its command (it is the callback's Kafka key).
MAX_GUID_CHARS = MAX_ID_CHARS
ACTED_ON = ("device.status", "media.ready")


class BadCallback(ValueError):
    """A callback Pacer cannot act on; the message says why."""


Guid = Annotated[str, Field(min_length=1, max_length=MAX_GUID_CHARS, pattern=NO_NUL)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    cmd: str = Field(max_length=100)
    guid: Guid
    ts: AwareDatetime  # ISO 8601 with a zone, or a Unix time (seconds or milliseconds)
    data: dict[str, Any] = Field(default_factory=dict)


class _Status(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    status: GuidState
    reason: str | None = None


class _MediaReady(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    mediaId: str = Field(min_length=1, max_length=200, pattern=NO_NUL)
    ok: bool
    reason: str | None = None


@dataclass(frozen=True)
class DeviceStatus:
    guid: str
    event: StatusEvent


@dataclass(frozen=True)
class MediaReady:
    guid: str
    media_id: str
    ok: bool
    reason: str | None


@dataclass(frozen=True)
class Other:
    cmd: str  # not Pacer's to act on (message.received …)


Callback = DeviceStatus | MediaReady | Other


def _clip(reason: str | None) -> str | None:
    if reason is None:
        return None
    reason = reason.replace("\x00", "")
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 1] + "…"


def _brief(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(loc_part(p) for p in e['loc']) or 'body'}: {error_text(e)}" for e in exc.errors()[:5])


def parse(raw: bytes | None) -> Callback:
    """The callback in ``raw``, or :class:`BadCallback` with a readable reason."""
    if not raw:
        raise BadCallback("empty body")
    try:
        body = _Body.model_validate_json(raw)
    except ValidationError as exc:
        raise BadCallback(f"not a callback: {_brief(exc)}") from None
    try:
        if body.cmd == "device.status":
            s = _Status.model_validate(body.data)
            return DeviceStatus(body.guid, StatusEvent(s.status, body.ts, "callback", _clip(s.reason)))
        if body.cmd == "media.ready":
            m = _MediaReady.model_validate(body.data)
            return MediaReady(body.guid, m.mediaId, m.ok, _clip(m.reason))
    except ValidationError as exc:
        raise BadCallback(f"{body.cmd}: {_brief(exc)}") from None
    return Other(body.cmd)
