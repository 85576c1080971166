"""One validation of a job request, for the planner and for the control API's dry run.

``validate_request`` takes the bytes as published and either returns the request with every
target rendered and keyed, or raises :class:`InvalidRequest` with the reason the planner
puts in the dead-letter header (and the dry run answers with). Whatever it accepts, the
store can hold: the model bounds every string, number and instant (``requests``), and this
module bounds what is derived from them — a rendered message (the gateway's limit) and an
idempotency key (a btree row). Those bounds also bound an item command far below a Kafka
record's limit (``MAX_COMMAND_BYTES``; a test builds the largest one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from pacer_common.domain.ids import IdemKey
from pacer_common.domain.requests import (
    NO_NUL,
    JobKind,
    JobRequest,
    RequeryTargets,
    Target,
    TextMessage,
)
from pacer_common.domain.templates import render, template_fields

MAX_CONTENT_CHARS = 4096  # a rendered message, as the gateway takes it
MAX_KEY_BYTES = 2048  # an idempotency key: the send ledger's primary key, under the btree row limit
MAX_COMMAND_BYTES = 256 * 1024  # an item command, well under a Kafka record's default 1 MiB
TARGET_MODES = ("snapshot", "requery")
MESSAGE_TAGS = ("text", "media", "tags", "sync")

Rendered = tuple[Target, str, IdemKey]  # a target, its rendered content, its idempotency key


class InvalidRequest(ValueError):
    """The request cannot become a job; the message is the reason, for people."""


class CannotPlan(ValueError):
    """The request fits the schema but cannot be planned; the message says why."""


@dataclass(frozen=True)
class ValidRequest:
    request: JobRequest
    template_fields: list[str]
    targets: list[Rendered] | None  # None for a requery job: its targets are fetched later


def validate_request(raw: bytes, now: datetime) -> ValidRequest:
    """The request in ``raw``, checked whole, or :class:`InvalidRequest` with the reason."""
    req = parse_request(raw)
    try:
        return prepare(req, now)
    except CannotPlan as exc:
        raise InvalidRequest(f"cannot plan job request: {exc}") from None


def parse_request(raw: bytes) -> JobRequest:
    """The model of ``raw``: UTF-8 JSON, one object, no key twice in any object, within the bounds."""
    try:
        req = JobRequest.model_validate_json(raw)
    except ValidationError as exc:
        raise InvalidRequest(describe(exc)) from None
    twice = _duplicate_key(raw)
    if twice is not None:
        raise InvalidRequest(f"invalid job request: key {twice!r} appears twice in one object")
    return req


def prepare(req: JobRequest, now: datetime) -> ValidRequest:
    """Check what the schema cannot: expiry, the template, and every target rendered and keyed."""
    if req.expire_at is not None and req.expire_at <= now:
        raise CannotPlan(f"request already expired at {req.expire_at.isoformat()}")
    # Only a text message is a template; the others are sent as they are.
    fields = template_fields(req.message.content, CannotPlan) if isinstance(req.message, TextMessage) else []
    if isinstance(req.targets, RequeryTargets):
        return ValidRequest(req, fields, None)
    seen: dict[tuple[str, str], int] = {}
    out: list[Rendered] = []
    for pos, target in enumerate(req.targets.items):
        pair = (target.guid, target.to_id)
        if pair in seen:
            raise CannotPlan(f"target guid={target.guid!r} to_id={target.to_id!r} appears twice "
                             f"(targets[{seen[pair]}] and targets[{pos}])")
        seen[pair] = pos
        content, key = render_target(req, target, target.vars, f"targets[{pos}]")
        out.append((target, content, key))
    return ValidRequest(req, fields, out)


def render_target(req: JobRequest, target: Target, variables: Mapping[str, str], where: str) -> tuple[str, IdemKey]:
    """One target's content and idempotency key, or :class:`CannotPlan` naming ``where``."""
    try:
        content = (render(req.message.content, variables) if isinstance(req.message, TextMessage)
                   else req.message.content)
    except KeyError as exc:
        raise CannotPlan(f"{where}: template variable {exc.args[0]!r} has no value") from None
    if len(content) > MAX_CONTENT_CHARS:
        raise CannotPlan(f"{where}: the rendered message has {len(content)} characters, over the gateway's "
                         f"limit of {MAX_CONTENT_CHARS}")
    key = idem_key(req, target)
    if len(key) > MAX_KEY_BYTES:  # escaped: ASCII, one byte a character
        raise CannotPlan(f"{where}: its idempotency key would be {len(key)} bytes, over the limit of "
                         f"{MAX_KEY_BYTES}; shorten guid, to_id or the request's ids")
    return content, key


def _part(value: str) -> str:
    # Escape the separator so that distinct targets can never produce the same key.
    return quote(value, safe="")


def idem_key(req: JobRequest, target: Target) -> IdemKey:
    """The business idempotency key of one customer-visible send.

    auto-reply: guid + the message answered; ticket notification: business id + status
    version + target; anything else: request + target + content version.
    """
    guid, to_id = _part(target.guid), _part(target.to_id)
    if req.kind is JobKind.AUTO_REPLY:
        return IdemKey(f"reply:{guid}:{_part(req.source_msg_uid or '')}:{to_id}")
    if req.kind is JobKind.TICKET_NOTIFY:
        return IdemKey(f"ticket:{_part(req.business_id or '')}:v{req.status_version}:{guid}:{to_id}")
    return IdemKey(f"push:{_part(req.request_id)}:{guid}:{to_id}:v{req.content_version}")


def storable(text: str) -> bool:
    """Whether Postgres can hold ``text``: no NUL, and UTF-8 (no lone surrogate)."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


# -- reasons --------------------------------------------------------------------------------

def describe(exc: ValidationError, limit: int = 5) -> str:
    """``field.path: message`` for the first few errors, e.g. ``targets.items.3.guid: Field required``."""
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(_loc_part(p) for p in _without_union_tag(err["loc"])) or "(request)"
        parts.append(f"{where}: {error_text(err)}")
    more = exc.error_count() - limit
    if more > 0:
        parts.append(f"… and {more} more")
    return "invalid job request: " + "; ".join(parts)


def error_text(err: ErrorDetails) -> str:
    """pydantic's message, in words a publisher can act on."""
    if err["type"] == "string_pattern_mismatch" and (err.get("ctx") or {}).get("pattern") == NO_NUL:
        return "contains a NUL character (\\u0000), which cannot be stored"
    if err["type"] == "string_unicode":
        return "is not valid Unicode text (a lone surrogate?), which cannot be stored"
    return err["msg"].removeprefix("Value error, ")


def _loc_part(part: int | str) -> str:
    # A dict key is part of the path (vars.<key>): quoted when it is not plain, so what the
    # reason names cannot carry a NUL or a page of text into a header.
    text = str(part)
    if text.isprintable() and len(text) <= 64 and storable(text):
        return text
    return repr(text[:64]) + ("…" if len(text) > 64 else "")


def _without_union_tag(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    # pydantic puts the union member's tag in the path (targets.snapshot.items.3,
    # message.text.content); the request has no such field, so the reader is told
    # ``targets.items.3``, ``message.content``.
    if len(loc) > 1 and ((loc[0] == "targets" and loc[1] in TARGET_MODES)
                         or (loc[0] == "message" and loc[1] in MESSAGE_TAGS)):
        return (loc[0], *loc[2:])
    return loc


class _Twice(Exception):
    pass


def _no_twice(pairs: list[tuple[str, Any]]) -> None:
    if len(pairs) > 1 and len(dict(pairs)) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _Twice(k)
            seen.add(k)
    # None: the objects are only looked at, not kept (a big request is not built twice).


def _duplicate_key(raw: bytes) -> str | None:
    """A key given twice in one object (pydantic would silently keep the last), or None."""
    try:
        json.loads(raw, object_pairs_hook=_no_twice)
    except _Twice as exc:
        return str(exc.args[0])
    return None
