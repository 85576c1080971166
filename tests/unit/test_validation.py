"""One validation for the planner and the dry run: every hostile request is refused with a
reason a publisher can act on, and whatever is accepted is something the store can hold."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pacer_common.domain.commands import JobCommands
from pacer_common.domain.ids import Guid, IdemKey, ItemId, JobId, ToId
from pacer_common.domain.requests import INT4_MAX, MAX_ID_CHARS, MAX_VARS
from pacer_common.domain.validation import (
    MAX_COMMAND_BYTES,
    MAX_CONTENT_CHARS,
    MAX_KEY_BYTES,
    InvalidRequest,
    storable,
    validate_request,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
BASE: dict[str, Any] = {
    "request_id": "r-1", "kind": "campaign", "created_by": "ops:alice",
    "message": {"type": "text", "content": "Hello {name}"},
    "targets": {"mode": "snapshot", "items": [{"guid": "g-1", "to_id": "room-1", "vars": {"name": "A"}}]},
}


def doc(**changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    d.update(changes)
    return d


def target(**changes: Any) -> dict[str, Any]:
    return doc(targets={"items": [{"guid": "g-1", "to_id": "room-1", "vars": {"name": "A"}, **changes}]})


def reason(raw: bytes | dict[str, Any]) -> str:
    body = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    with pytest.raises(InvalidRequest) as info:
        validate_request(body, NOW)
    text = str(info.value)
    assert storable(text)  # a Kafka header and a log line: no NUL, always UTF-8
    return text


def test_the_example_is_valid_and_rendered() -> None:
    valid = validate_request(json.dumps(BASE).encode(), NOW)
    assert valid.targets is not None
    assert [(t.guid, content, key) for t, content, key in valid.targets] == [
        ("g-1", "Hello A", "push:r-1:g-1:room-1:v0")]


NUL = "r\u0000x"


@pytest.mark.parametrize(("body", "where"), [
    (doc(request_id=NUL), "request_id"),
    (doc(created_by=NUL), "created_by"),
    (doc(message={"content": NUL}), "message.content"),
    (target(guid=NUL), "targets.items.0.guid"),
    (target(to_id=NUL), "targets.items.0.to_id"),
    (target(vars={"name": NUL}), "targets.items.0.vars.name"),
    (target(vars={"name": "A", NUL: "x"}), "targets.items.0.vars"),
    (doc(kind="auto_reply", source_msg_uid=NUL), "source_msg_uid"),
    (doc(kind="ticket_notify", business_id=NUL, status_version=1), "business_id"),
    (doc(targets={"mode": "requery", "url": "https://a.example/x", "vars": {"k": NUL}}), "targets.vars.k"),
])
def test_a_nul_anywhere_is_refused_naming_the_field(body: dict[str, Any], where: str) -> None:
    text = reason(body)
    assert text.startswith(f"invalid job request: {where}")
    assert "contains a NUL character" in text


@pytest.mark.parametrize("escape", ["\\ud800", "\\udc00", "\\ud83d x"])
def test_a_lone_surrogate_is_refused(escape: str) -> None:
    raw = json.dumps(target(to_id="PLACE")).replace("PLACE", f"r{escape}x").encode()
    assert "surrogate" in reason(raw) or "hex escape" in reason(raw)


@pytest.mark.parametrize(("body", "where"), [
    (doc(content_version=INT4_MAX + 1), "content_version"),
    (doc(content_version=10**30), "content_version"),
    (doc(kind="ticket_notify", business_id="T", status_version=INT4_MAX + 1), "status_version"),
    (doc(budget={"max_sends": INT4_MAX + 1}), "budget.max_sends"),
    (doc(priority=10), "priority"),
    (doc(targets={"mode": "requery", "url": "https://a.example/x", "page_size": 10**9}), "targets.page_size"),
])
def test_numbers_past_their_columns_range_are_refused(body: dict[str, Any], where: str) -> None:
    assert reason(body).startswith(f"invalid job request: {where}: Input should be less than or equal to")


def test_the_largest_numbers_the_columns_hold_are_accepted() -> None:
    body = doc(kind="ticket_notify", business_id="T", status_version=INT4_MAX, content_version=INT4_MAX,
               budget={"max_sends": INT4_MAX}, priority=9)
    assert validate_request(json.dumps(body).encode(), NOW).request.status_version == INT4_MAX


def test_a_rendered_message_past_the_gateways_limit_is_refused() -> None:
    body = doc(message={"content": "{name}{name}"})
    body["targets"]["items"][0]["vars"]["name"] = "x" * (MAX_CONTENT_CHARS // 2 + 1)
    assert reason(body) == (f"cannot plan job request: targets[0]: the rendered message has "
                            f"{MAX_CONTENT_CHARS + 2} characters, over the gateway's limit of {MAX_CONTENT_CHARS}")


@pytest.mark.parametrize(("vars_", "why"), [
    ({f"v{i}": "x" for i in range(MAX_VARS + 1)}, "Dictionary should have at most 64 items"),
    ({"name": "x" * 5000}, "String should have at most 4096 characters"),
    ({"x" * 200: "x", "name": "A"}, "String should have at most 128 characters"),
])
def test_vars_are_bounded(vars_: dict[str, str], why: str) -> None:
    assert why in reason(target(vars=vars_))


def test_an_idempotency_key_past_the_index_limit_is_refused() -> None:
    wide = "é" * MAX_ID_CHARS  # 2 bytes each, 6 characters once escaped
    text = reason(target(guid=wide, to_id=wide))
    assert text.startswith("cannot plan job request: targets[0]: its idempotency key would be")
    assert f"over the limit of {MAX_KEY_BYTES}" in text


@pytest.mark.parametrize(("raw", "why"), [
    (b"", "(request): Invalid JSON: EOF while parsing"),
    (b"   ", "(request): Invalid JSON: EOF while parsing"),
    (b"[]", "(request): Input should be an object"),
    (b"null", "(request): Input should be an object"),
    (b'"x"', "(request): Input should be an object"),
    (b"17", "(request): Input should be an object"),
    (b"\xff\xfe{}", "(request): Invalid JSON"),
    (b'{"request_id": "r\xc3"}', "(request): Invalid JSON"),
    (b"\xef\xbb\xbf" + json.dumps(BASE).encode(), "(request): Invalid JSON"),
    (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "recursion limit exceeded"),
    (json.dumps(target(vars={"name": "A"})).replace('"A"', "[" * 5000 + "]" * 5000).encode(), "Invalid JSON"),
    (json.dumps({**BASE, "extra": list(range(100_000))}).encode(), "extra: Extra inputs are not permitted"),
])
def test_pathological_json_is_refused_with_the_reason(raw: bytes, why: str) -> None:
    text = reason(raw)
    assert text.startswith("invalid job request: ") and why in text


def test_a_key_given_twice_is_refused_at_any_depth() -> None:
    top = json.dumps(BASE).replace('"request_id": "r-1"', '"request_id": "r-1", "request_id": "r-2"')
    assert reason(top.encode()) == "invalid job request: key 'request_id' appears twice in one object"
    deep = json.dumps(BASE).replace('"name": "A"', '"name": "A", "name": "B"')
    assert reason(deep.encode()) == "invalid job request: key 'name' appears twice in one object"


@pytest.mark.parametrize(("field", "value", "why"), [
    ("expire_at", "2026-12-01T00:00:00", "Input should have timezone info"),
    ("expire_at", "2026-12-01", "Input should have timezone info"),
    ("not_before", "2026-12-01T00:00:00", "Input should have timezone info"),
    ("expire_at", "9999-12-31T23:59:59-23:00", "must be between 1970-01-01 and 9999-01-01 (UTC)"),
    ("not_before", "0001-01-01T00:00:00+01:00", "must be between 1970-01-01 and 9999-01-01 (UTC)"),
    ("not_before", "1960-01-01T00:00:00Z", "must be between 1970-01-01 and 9999-01-01 (UTC)"),
])
def test_timestamps_need_a_zone_and_a_storable_range(field: str, value: str, why: str) -> None:
    assert reason(doc(**{field: value})) == f"invalid job request: {field}: {why}"


def test_a_request_expired_before_it_is_planned_is_refused() -> None:
    past = (NOW - timedelta(seconds=1)).isoformat()
    assert reason(doc(expire_at=past)) == f"cannot plan job request: request already expired at {past}"


def test_the_largest_item_command_fits_a_kafka_record_with_room_to_spare() -> None:
    # Every character JSON escapes costs 6 bytes; the key is ASCII and bounded by itself.
    worst = "\x01" * MAX_ID_CHARS
    commands = JobCommands(JobId("j" * 36), 9, "ticket_notify", NOW, NOW, [
        (ItemId("i" * 36), INT4_MAX, Guid(worst), ToId(worst), "\x01" * MAX_CONTENT_CHARS, IdemKey("k" * MAX_KEY_BYTES))])
    ((_, value),) = list(commands.encoded())
    assert len(value) <= MAX_COMMAND_BYTES


# -- generated ------------------------------------------------------------------------------

hostile_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40) | st.sampled_from(
    ["\u0000", "a\u0000", "\ud800", "\udfff", "é" * 300, "x" * 5000, "", " "])
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | hostile_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=12,
)


def _mutate(path: list[str], value: Any) -> dict[str, Any]:
    d = doc(kind="ticket_notify", business_id="T-1", status_version=1, expire_at="2027-01-01T00:00:00Z")
    node: Any = d
    for p in path[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if isinstance(node, list):
        node[int(path[-1])] = value
    else:
        node[path[-1]] = value
    return d


PATHS = [p.split(".") for p in (
    "request_id", "created_by", "message.content", "content_version", "status_version", "business_id",
    "expire_at", "priority", "budget", "targets.items.0.guid", "targets.items.0.to_id",
    "targets.items.0.vars", "targets.items.0.vars.name", "targets.items", "targets", "kind")]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=st.sampled_from(PATHS), value=json_values)
def test_any_value_anywhere_is_accepted_storably_or_refused_with_a_reason(path: list[str], value: Any) -> None:
    raw = json.dumps(_mutate(path, value)).encode()  # ensure_ascii: lone surrogates travel as escapes
    try:
        valid = validate_request(raw, NOW)
    except InvalidRequest as exc:
        assert str(exc).startswith(("invalid job request: ", "cannot plan job request: "))
        assert storable(str(exc))
        return
    req = valid.request
    texts = [req.request_id, req.created_by, req.message.content, req.business_id or ""]
    for t, content, key in valid.targets or []:
        texts += [t.guid, t.to_id, content, key, *t.vars, *t.vars.values()]
        assert len(content) <= MAX_CONTENT_CHARS and len(key.encode()) <= MAX_KEY_BYTES
    assert all(storable(t) for t in texts)
    assert 0 <= (req.status_version or 0) <= INT4_MAX and 0 <= req.content_version <= INT4_MAX


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_a_reason(raw: bytes) -> None:
    try:
        validate_request(raw, NOW)
    except InvalidRequest as exc:
        assert storable(str(exc))
