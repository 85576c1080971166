"""One validation of a job request, for the planner and for the control API's dry run.

``validate_request`` takes the bytes as published and either returns the request with every
target rendered and keyed (each message rendered to be checked, and again whenever it is read:
``RenderedTargets``), or raises :class:`InvalidRequest` with the reason the planner puts in
the dead-letter header (and the dry run answers with). Whatever it accepts, the
store can hold: the model bounds every string, number and instant (``requests``), and this
module bounds what is derived from them — a rendered message (the gateway's limit) and an
idempotency key (a btree row). Those bounds also bound an item command far below a Kafka
record's limit (``MAX_COMMAND_BYTES``; a test builds the largest one).

A snapshot's targets are the bulk of a big request, and a pydantic model per target costs
more than everything else the planner does with it. So a request is first tried on a fast
path (``_fast_parse``): one JSON parse, the envelope (everything but the targets) validated
by the model, and the targets checked by plain code against the model's own bounds. The
fast path only ever *accepts*: whatever it is not sure of (any target out of bounds, a
``\\u0000`` or surrogate escape anywhere in the bytes, a key twice, JSON the parser
refuses) goes through the model whole, which decides and gives the reason. A property test
holds the two to the same answer.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, overload
from urllib.parse import quote

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from pacer_common.domain.dead_letters import tenant_in
from pacer_common.domain.ids import Guid, IdemKey, ToId
from pacer_common.domain.requests import (
    MAX_ID_CHARS,
    MAX_SNAPSHOT_TARGETS,
    MAX_VAR_NAME_CHARS,
    MAX_VAR_VALUE_CHARS,
    MAX_VARS,
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


class TargetFields(Protocol):
    """What planning reads of a target: a :class:`Target`, or a :class:`TargetRow` the fast path made."""

    @property
    def guid(self) -> Guid: ...
    @property
    def to_id(self) -> ToId: ...
    @property
    def vars(self) -> Mapping[str, str]: ...


class TargetRow(NamedTuple):
    """A target the fast path checked against :class:`Target`'s bounds, without building the model."""

    guid: Guid
    to_id: ToId
    vars: Mapping[str, str]


Rendered = tuple[TargetFields, str, IdemKey]  # a target, its rendered content, its idempotency key


class InvalidRequest(ValueError):
    """The request cannot become a job; the message is the reason, for people. ``request_id``:
    its id, where it parsed that far (a request judged again may be one whose job is stored).
    ``tenant``: its tenant, where it parsed that far (the model's, or the one its JSON object
    names): its dead letter is that tenant's, however large the request (too large to be read
    again for it, or to be kept whole)."""

    def __init__(self, reason: str, request_id: str | None = None, tenant: str | None = None) -> None:
        super().__init__(reason)
        self.request_id = request_id
        self.tenant = tenant


class CannotPlan(ValueError):
    """The request fits the schema but cannot be planned; the message says why."""


@dataclass(frozen=True)
class ValidRequest:
    request: JobRequest  # a snapshot's targets.items may be a LazyTargets: read them from ``targets``
    template_fields: list[str]
    targets: RenderedTargets | None  # None for a requery job: its targets are fetched later


def validate_request(raw: bytes, now: datetime) -> ValidRequest:
    """The request in ``raw``, checked whole, or :class:`InvalidRequest` with the reason."""
    doc = _document(raw)
    fast = None if doc is None else _fast_from(doc)
    if fast is not None:
        # The rows hold what planning needs: the document's objects go before the targets are
        # rendered and keyed (its one dict a target, its lists and strings).
        (req, rows), fast, doc = fast, None, None
    else:
        # What the model refuses is still the tenant's its JSON object names; the document is
        # not held while the model reads the bytes again.
        tenant, doc = tenant_in(doc), None
        try:
            req, rows = parse_request(raw), None
        except InvalidRequest as exc:
            raise InvalidRequest(str(exc), exc.request_id, tenant) from None
    try:
        return prepare(req, now, rows)
    except CannotPlan as exc:
        raise InvalidRequest(f"cannot plan job request: {exc}", req.request_id, req.tenant) from None


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


def prepare(req: JobRequest, now: datetime, rows: Sequence[TargetFields] | None = None) -> ValidRequest:
    """Check what the schema cannot: expiry, the template, and every target rendered and keyed.
    ``rows``: the snapshot's targets when the fast path checked them (else the model's)."""
    if req.expire_at is not None and req.expire_at <= now:
        raise CannotPlan(f"request already expired at {req.expire_at.isoformat()}")
    # Only a text message is a template; the others are sent as they are.
    fields = template_fields(req.message.content, CannotPlan) if isinstance(req.message, TextMessage) else []
    if isinstance(req.targets, RequeryTargets):
        return ValidRequest(req, fields, None)
    targets: Sequence[TargetFields] = req.targets.items if rows is None else rows
    checked = _render_all(req, targets)
    return ValidRequest(req, fields, _render_each(req, targets) if checked is None else checked)


def _render_all(req: JobRequest, targets: Sequence[TargetFields]) -> RenderedTargets | None:
    """Every target checked and keyed, a step at a time over all of them (the biggest
    requests have millions); None if any step finds a fault: ``_render_each`` names it. Each
    message is rendered to be measured and dropped: what a request renders to is up to
    4,096 characters per target, hundreds of times the target's own bytes."""
    guids, to_ids = [t.guid for t in targets], [t.to_id for t in targets]
    if len(set(zip(guids, to_ids, strict=True))) != len(targets):
        return None
    template = req.message.content
    if isinstance(req.message, TextMessage) and _may_render_blank(template):
        return None  # checked target by target: one whose variables are all blank is refused
    try:  # only a text message is a template, and only its text is sent as such (the others' content
        # is a summary for people: a media item's type and URL, a tags action's ids)
        longest = max(len(render(template, t.vars)) for t in targets) if isinstance(req.message, TextMessage) else 0
    except KeyError:
        return None
    keys = idem_keys(req, guids, to_ids)
    if longest > MAX_CONTENT_CHARS or max(map(len, keys)) > MAX_KEY_BYTES:
        return None
    return RenderedTargets(req, targets, keys)


def _may_render_blank(template: str) -> bool:
    """Whether some variables could render ``template`` blank: it has nothing but fields and
    white space. Any other text is in every message it renders."""
    return not render(template, dict.fromkeys(template_fields(template, CannotPlan), "")).strip()


def _render_each(req: JobRequest, targets: Sequence[TargetFields]) -> RenderedTargets:
    """Target by target, in order: the first fault raised as :class:`CannotPlan`, naming it."""
    seen: dict[tuple[str, str], int] = {}
    keys: list[IdemKey] = []
    for pos, target in enumerate(targets):
        pair = (target.guid, target.to_id)
        if pair in seen:
            raise CannotPlan(f"target guid={target.guid!r} to_id={target.to_id!r} appears twice "
                             f"(targets[{seen[pair]}] and targets[{pos}])")
        seen[pair] = pos
        keys.append(render_target(req, target, target.vars, f"targets[{pos}]")[1])
    return RenderedTargets(req, targets, keys)


class RenderedTargets(Sequence[Rendered]):
    """A snapshot's targets, each with its content and idempotency key: the content rendered
    from the template and the target's vars each time it is read, never kept. What a request
    holds is bounded by its bytes; what it renders to is not (4,096 characters, four bytes each
    in memory, for a target of thirty bytes), so nothing holds every rendered message at
    once: a reader renders, uses and drops (``PlannedItem.content`` likewise)."""

    def __init__(self, req: JobRequest, targets: Sequence[TargetFields], keys: Sequence[IdemKey]) -> None:
        self.text = req.message.content
        self.templated = isinstance(req.message, TextMessage)  # else the text is sent as it is
        self.targets, self.keys = targets, keys

    def content(self, target: TargetFields) -> str:
        return render(self.text, target.vars) if self.templated else self.text

    def __len__(self) -> int:
        return len(self.targets)

    @overload
    def __getitem__(self, i: int) -> Rendered: ...
    @overload
    def __getitem__(self, i: slice) -> list[Rendered]: ...

    def __getitem__(self, i: int | slice) -> Rendered | list[Rendered]:
        if isinstance(i, slice):
            return [(t, self.content(t), k) for t, k in zip(self.targets[i], self.keys[i], strict=True)]
        t = self.targets[i]
        return t, self.content(t), self.keys[i]

    def __iter__(self) -> Iterator[Rendered]:
        return ((t, self.content(t), k) for t, k in zip(self.targets, self.keys, strict=True))


def render_target(req: JobRequest, target: TargetFields, variables: Mapping[str, str],
                  where: str) -> tuple[str, IdemKey]:
    """One target's content and idempotency key, or :class:`CannotPlan` naming ``where``."""
    try:
        content = (render(req.message.content, variables) if isinstance(req.message, TextMessage)
                   else req.message.content)
    except KeyError as exc:
        raise CannotPlan(f"{where}: template variable {exc.args[0]!r} has no value") from None
    if not content.strip():
        raise CannotPlan(f"{where}: the rendered message is blank (the template's variables are blank for this "
                         "target): the gateway sends no empty text")
    if isinstance(req.message, TextMessage) and len(content) > MAX_CONTENT_CHARS:
        raise CannotPlan(f"{where}: the rendered message has {len(content)} characters, over the gateway's "
                         f"limit of {MAX_CONTENT_CHARS}")
    key = idem_key(req, target)
    if len(key) > MAX_KEY_BYTES:  # escaped: ASCII, one byte a character
        raise CannotPlan(f"{where}: its idempotency key would be {len(key)} bytes, over the limit of "
                         f"{MAX_KEY_BYTES}; shorten guid, to_id or the request's ids")
    return content, key


def common_content(req: JobRequest) -> str | None:
    """The content every item of ``req``'s job has unless its target's own variables change
    it: the template rendered with the request's static variables (a requery's ``targets.vars``;
    a snapshot has none), or a media, tags or sync message's summary. None when the template
    needs a variable only targets give. The job stores it once and an item whose content equals
    it stores none (``items.content`` NULL): equality decides, so a target overriding a static
    variable keeps its own content."""
    if not isinstance(req.message, TextMessage):
        return req.message.content
    static = req.targets.vars if isinstance(req.targets, RequeryTargets) else {}
    try:
        content = render(req.message.content, static)
    except KeyError:  # a field only targets fill (the template itself was checked by prepare)
        return None
    return content if len(content) <= MAX_CONTENT_CHARS else None


SHARED_SAMPLE = 1000  # contents looked at for the one most share: a bounded cost per job


def most_shared(contents: Iterable[str]) -> str | None:
    """The content most of a snapshot's first :data:`SHARED_SAMPLE` items have, if at least
    two do: targets that each carry the same value of a variable (a snapshot has no static
    ones) render the same text."""
    counted = Counter(islice(contents, SHARED_SAMPLE)).most_common(1)
    return counted[0][0] if counted and counted[0][1] > 1 else None


_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*")  # what quote(…, safe="") leaves as it is


def _part(value: str) -> str:
    # Escape the separator so that distinct targets can never produce the same key.
    return value if _UNRESERVED.fullmatch(value) else quote(value, safe="")


def _key_format(req: JobRequest) -> Callable[[str, str], IdemKey]:
    """``(escaped guid, escaped to_id) → key`` for ``req``, the request's own parts escaped once."""
    if req.kind is JobKind.AUTO_REPLY:
        uid = _part(req.source_msg_uid or "")
        return lambda guid, to_id: IdemKey(f"reply:{guid}:{uid}:{to_id}")
    if req.kind is JobKind.TICKET_NOTIFY:
        ticket = f"ticket:{_part(req.business_id or '')}:v{req.status_version}"
        return lambda guid, to_id: IdemKey(f"{ticket}:{guid}:{to_id}")
    push, version = f"push:{_part(req.request_id)}", f"v{req.content_version}"
    return lambda guid, to_id: IdemKey(f"{push}:{guid}:{to_id}:{version}")


def idem_keys(req: JobRequest, guids: Sequence[str], to_ids: Sequence[str]) -> list[IdemKey]:
    """:func:`idem_key` of many targets at once: when no guid and no to_id needs escaping
    (one match over all of them says so), none is escaped one by one."""
    key = _key_format(req)
    if _UNRESERVED.fullmatch("".join(guids)) and _UNRESERVED.fullmatch("".join(to_ids)):
        return [key(g, t) for g, t in zip(guids, to_ids, strict=True)]
    return [key(_part(g), _part(t)) for g, t in zip(guids, to_ids, strict=True)]


def idem_key(req: JobRequest, target: TargetFields) -> IdemKey:
    """The business idempotency key of one customer-visible send.

    auto-reply: guid + the message answered; ticket notification: business id + status
    version + target; anything else: request + target + content version.
    """
    return IdemKey(_key_format(req)(_part(target.guid), _part(target.to_id)))


def storable(text: str) -> bool:
    """Whether Postgres can hold ``text``: no NUL, and UTF-8 (no lone surrogate)."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


# -- the fast path ----------------------------------------------------------------------------

# A NUL or a UTF-16 surrogate can only reach a parsed string through a \u escape (raw
# control characters are not JSON, and UTF-8 cannot encode a surrogate). Bytes with a NUL
# escape anywhere (or merely something that looks like one) are left to the model. A
# surrogate escape is most often half of a pair, an emoji as Python's json.dumps writes it,
# which parses as one character: only a parsed string that still holds a surrogate (a half
# alone, which the store cannot hold) leaves the request to the model.
_NUL_ESCAPE = re.compile(rb"\\u0000")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_NO_VARS: Mapping[str, str] = MappingProxyType({})


def _fast_parse(raw: bytes) -> tuple[JobRequest, list[TargetRow]] | None:
    """A snapshot request and its targets, when every target is plainly within
    :class:`Target`'s bounds; None whenever only the model can say (it then decides)."""
    doc = _document(raw)
    return None if doc is None else _fast_from(doc)


def _document(raw: bytes) -> Any:
    """``raw`` parsed as JSON, for the fast path; None where only the model can read it (an
    escape the store cannot hold, a key twice, JSON the parser refuses)."""
    if _NUL_ESCAPE.search(raw):
        return None
    try:  # UTF-8 only, as the model reads it (json.loads of bytes would also take UTF-16)
        doc = json.loads(raw.decode(), object_pairs_hook=_unique)
    except (ValueError, RecursionError, _Twice):
        return None
    return None if _SURROGATE_ESCAPE.search(raw) and not _all_storable(doc) else doc


def _all_storable(doc: Any) -> bool:
    """Whether every string of the parsed ``doc`` (a key or a value, at any depth) is
    :func:`storable`: none holds half of a surrogate pair escaped without its other half."""
    stack = [doc]
    while stack:
        value = stack.pop()
        if type(value) is str:
            if not value.isascii() and not storable(value):
                return False
        elif type(value) is dict:
            stack.extend(value)
            stack.extend(value.values())
        elif type(value) is list:
            stack.extend(value)
    return True


def _fast_from(doc: Any) -> tuple[JobRequest, list[TargetRow]] | None:
    """:func:`_fast_parse` of the parsed document."""
    targets = doc.get("targets") if type(doc) is dict else None
    if type(targets) is not dict or targets.get("mode", "snapshot") != "snapshot":
        return None
    items = targets.get("items")
    if type(items) is not list or not 1 <= len(items) <= MAX_SNAPSHOT_TARGETS:
        return None
    rows = _target_rows(items)
    if rows is None:
        return None
    # The envelope, by the model, in JSON mode like the request itself: with one target
    # standing for all (they are checked above), so its cost does not grow with them.
    try:
        req = JobRequest.model_validate_json(json.dumps({**doc, "targets": {**targets, "items": items[:1]}}))
    except (ValidationError, ValueError, RecursionError):
        return None
    whole = req.targets.model_copy(update={"items": LazyTargets(rows)})
    return req.model_copy(update={"targets": whole}), rows


def _target_rows(items: list[Any]) -> list[TargetRow] | None:
    """Each item as a row, if each is what :class:`Target` accepts without a doubt; else None.
    A guid's targets share one string of it: a request names a few guids many times."""
    rows: list[TargetRow] = []
    guids: dict[str, str] = {}
    for t in items:
        if type(t) is not dict:
            return None
        guid, to_id = t.get("guid"), t.get("to_id")
        if (type(guid) is not str or type(to_id) is not str or not 0 < len(guid) <= MAX_ID_CHARS
                or not 0 < len(to_id) <= MAX_ID_CHARS):
            return None
        if len(t) == 2:
            variables: Mapping[str, str] = _NO_VARS
        else:
            variables = t.get("vars")  # type: ignore[assignment]  # checked on the next lines
            if len(t) != 3 or type(variables) is not dict or len(variables) > MAX_VARS:
                return None
            for name, value in variables.items():
                if type(value) is not str or not 0 < len(name) <= MAX_VAR_NAME_CHARS or len(
                        value) > MAX_VAR_VALUE_CHARS:
                    return None
        rows.append(TargetRow(Guid(guids.setdefault(guid, guid)), ToId(to_id), variables))
    return rows


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Twice()
    return d


def _target(row: TargetRow) -> Target:
    return Target.model_validate({"guid": row.guid, "to_id": row.to_id, "vars": dict(row.vars)})


class LazyTargets(Sequence[Target]):
    """A fast-path request's targets as the model holds them: each a :class:`Target` when
    read (the fast path checked every one), none built unless someone reads them. Held as the
    checked rows (their strings, and each target's own ``vars``), not the document's target
    objects, which go with the document. pydantic cannot
    serialise it: dump such a request without its targets (the planner stores a snapshot's
    targets as items, never in the job's row)."""

    def __init__(self, rows: list[TargetRow]) -> None:
        self._items = rows

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, i: int) -> Target: ...
    @overload
    def __getitem__(self, i: slice) -> list[Target]: ...

    def __getitem__(self, i: int | slice) -> Target | list[Target]:
        if isinstance(i, slice):
            return [_target(t) for t in self._items[i]]
        return _target(self._items[i])

    def __iter__(self) -> Iterator[Target]:
        return (_target(t) for t in self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


# -- reasons --------------------------------------------------------------------------------

def describe(exc: ValidationError, limit: int = 5) -> str:
    """``field.path: message`` for the first few errors, e.g. ``targets.items.3.guid: Field required``."""
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(loc_part(p) for p in _without_union_tag(err["loc"])) or "(request)"
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


def loc_part(part: int | str) -> str:
    """One step of a validation error's path (pydantic's ``loc``), as a reason names it. A dict
    key is part of the path (``vars.<key>``): quoted and cut when it is not plain, so what the
    reason names cannot carry a NUL, a lone surrogate or a page of text into a header or a
    text column. Every reason that names a path builds it with this."""
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
