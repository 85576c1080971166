"""A request too large to be parsed (over ``MAX_REQUEST_BYTES``: a compressed record may hold
any size once decompressed) read only at its ends, for its ``request_id`` and ``tenant``.

Such a request is refused unparsed, unless its id already has a job of its tenant: a request
planned before the limit existed (brokers took them) comes again on a redelivery or a rewind
while its job runs, and must be that job again, never a dead-letter record saying refused.
Its id and tenant are what the JSON object's top-level members wholly within its first and
last :data:`END_BYTES` say: in a valid request only ``targets`` can be that long (a snapshot's
items), so every other member is read, before it from the head and after it from the tail,
and a ``tenant`` read in neither is absent: the default tenant, as validation takes it.

Best effort, bounded: at most twice :data:`END_BYTES` is decoded, whatever the size. Bytes
that do not start as a JSON object, or that name a member twice (validation refuses both),
name no id and no tenant.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pacer_common.domain.requests import DEFAULT_TENANT, MAX_ID_CHARS, TENANT_NAME

# Read at each end: more than all of a valid request's members but ``targets`` take together,
# unless nearly every character of them is escaped (``\uXXXX``).
END_BYTES = 262_144

_WS = re.compile(r"[ \t\n\r]*")
_WS_TO_END = re.compile(rb"[ \t\n\r]*\Z")
_DECODER = json.JSONDecoder()
Members = list[tuple[str, Any]]


def named_at_ends(value: bytes) -> tuple[str | None, str | None]:
    """The ``request_id`` and the tenant that ``value``'s ends name, each None when they do
    not name one."""
    members = _members_at_ends(value)
    if members is None:
        return None, None
    rid, tenant = members.get("request_id"), members.get("tenant", DEFAULT_TENANT)
    return (rid if isinstance(rid, str) and 0 < len(rid) <= MAX_ID_CHARS else None,
            tenant if isinstance(tenant, str) and re.fullmatch(TENANT_NAME, tenant) else None)


def _members_at_ends(value: bytes) -> dict[str, Any] | None:
    """The object's top-level members wholly within its ends; None if ``value`` is not one
    JSON object there, or names a member twice."""
    head = value[:END_BYTES].decode("utf-8", "replace")
    start = _skip(head, 0)
    if head[start:start + 1] != "{":
        return None
    members, closed = _members(head, start + 1)
    if closed is not None:  # the whole object is in the head: only whitespace may follow it
        return _unique(members) if _WS_TO_END.match(value, len(head[:closed].encode())) else None
    return _unique(members + _last_members(value[-END_BYTES:].decode("utf-8", "replace")))


def _last_members(tail: str) -> Members:
    """The object's members after its longest one, read back from its end: those after the
    leftmost comma of ``tail`` from which what follows reads as members that close the object
    at its end (none if its longest member is its last)."""
    comma = tail.find(",")
    while comma >= 0:
        members, closed = _members(tail, comma + 1)
        if closed is not None and members and not tail[closed:].strip(" \t\n\r"):
            return members
        comma = tail.find(",", comma + 1)
    return []


def _unique(members: Members) -> dict[str, Any] | None:
    found = dict(members)
    return found if len(found) == len(members) else None


def _skip(text: str, i: int) -> int:
    """``i`` past any whitespace."""
    m = _WS.match(text, i)
    return i if m is None else m.end()


def _members(text: str, i: int) -> tuple[Members, int | None]:
    """The members of an object read from ``text[i:]`` (just after its ``{`` or a ``,``) up to
    the first one not wholly in ``text`` (each followed by a ``,`` or the ``}`` that closes the
    object), and the index just past that ``}`` if it is in ``text``."""
    members: Members = []
    i = _skip(text, i)
    if text[i:i + 1] == "}":
        return members, i + 1
    try:
        while text[i:i + 1] == '"':
            key, i = _DECODER.raw_decode(text, i)  # a string: it starts with a quote
            i = _skip(text, i)
            if text[i:i + 1] != ":":
                break
            member, i = _DECODER.raw_decode(text, _skip(text, i + 1))
            i = _skip(text, i)
            if text[i:i + 1] not in (",", "}"):  # at the end of the text: perhaps not all of it (a number)
                break
            members.append((key, member))
            if text[i] == "}":
                return members, i + 1
            i = _skip(text, i + 1)
    except ValueError:  # a value not wholly in the text, or not JSON
        pass
    return members, None
