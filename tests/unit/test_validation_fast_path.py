"""The fast path of ``validate_request`` (snapshot targets checked without a model per
target) answers exactly what the model answers: the same request accepted with the same
targets, contents and keys, or the same reason for refusing it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pacer_common.domain.ids import Guid, ToId
from pacer_common.domain.requests import MAX_ID_CHARS, MAX_VAR_NAME_CHARS, MAX_VAR_VALUE_CHARS, MAX_VARS, Target
from pacer_common.domain.validation import (
    CannotPlan,
    InvalidRequest,
    TargetRow,
    _fast_parse,
    idem_key,
    idem_keys,
    parse_request,
    prepare,
    validate_request,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def by_model(raw: bytes) -> Any:
    """What the model alone says: every target a pydantic ``Target``, rendered one by one."""
    try:
        valid = prepare(parse_request(raw), NOW)
    except InvalidRequest as exc:
        return ("refused", str(exc))
    except CannotPlan as exc:
        return ("refused", f"cannot plan job request: {exc}")
    return ("accepted", valid.request.model_dump(exclude={"targets"}), valid.template_fields,
            [(t.guid, t.to_id, dict(t.vars), content, key) for t, content, key in valid.targets or []])


def by_validate_request(raw: bytes) -> Any:
    try:
        valid = validate_request(raw, NOW)
    except InvalidRequest as exc:
        return ("refused", str(exc))
    return ("accepted", valid.request.model_dump(exclude={"targets"}), valid.template_fields,
            [(t.guid, t.to_id, dict(t.vars), content, key) for t, content, key in valid.targets or []])


def edge_text(lo: int, hi: int) -> st.SearchStrategy[Any]:
    """Text near the bounds, with the characters a store or the JSON parser cares about."""
    chars = st.sampled_from(["a", "Z", "9", "-", "_", ".", "~", ":", "/", "%", " ", "é", "😀", "\x00", "\ud800",
                             "\udfff", "\\", '"', "\n", "{", "}"])
    plain = st.text(alphabet=st.sampled_from("abc-_.~0"), min_size=1, max_size=12)
    at_bounds = st.sampled_from([lo, max(lo - 1, 0), hi, hi + 1]).map(lambda n: "x" * n)
    return plain | plain | st.text(chars, max_size=8) | at_bounds


not_text: st.SearchStrategy[Any] = st.none() | st.integers() | st.floats(allow_nan=True) | st.booleans() | st.just([]) | st.just({})
ident = edge_text(1, MAX_ID_CHARS) | not_text
var_name = st.sampled_from(["name", "n", "x" * MAX_VAR_NAME_CHARS, "x" * (MAX_VAR_NAME_CHARS + 1), "", "\x00"])
var_value = edge_text(0, MAX_VAR_VALUE_CHARS) | not_text
variables = st.one_of(
    st.dictionaries(var_name, var_value, max_size=3),
    st.just({"name": "A", **{f"v{i}": "" for i in range(MAX_VARS - 1)}}),
    st.just({"name": "A", **{f"v{i}": "" for i in range(MAX_VARS)}}),
    not_text,
)


@st.composite
def a_target(draw: st.DrawFn) -> Any:
    """An ordinary target with one thing changed, to a value at or past a bound, of another
    type, or not there."""
    t: dict[str, Any] = {"guid": "g9", "to_id": "t9", "vars": {"name": "n"}}
    change = draw(st.sampled_from(["guid", "to_id", "vars", "name", "extra", "drop", "whole"]))
    if change in ("guid", "to_id"):
        t[change] = draw(ident)
    elif change == "vars":
        t["vars"] = draw(variables)
    elif change == "name":
        t["vars"] = {"name": draw(var_value | st.sampled_from(["x" * MAX_VAR_VALUE_CHARS, "x" * (MAX_VAR_VALUE_CHARS + 1),
                                                              "x" * (MAX_VAR_VALUE_CHARS // 2 + 1)]))}
    elif change == "extra":
        t[draw(st.sampled_from(["extra", "Guid", "var"]))] = "x"
    elif change == "drop":
        t.pop(draw(st.sampled_from(["guid", "to_id", "vars"])))
    else:
        return draw(not_text | st.just("g9"))
    return t


@st.composite
def a_request(draw: st.DrawFn) -> bytes:
    """Mostly a plain request with ordinary targets and at most one odd one (so that both
    answers are common), sometimes an odd envelope or a key given twice."""
    ordinary = st.builds(lambda g, t, n: {"guid": g, "to_id": t, "vars": {"name": n}},
                         st.sampled_from(["g1", "g2", "g 3"]), st.text("ab:-é", min_size=1, max_size=3),
                         st.text("xy", max_size=2))
    targets = draw(st.lists(ordinary, min_size=1, max_size=5))
    if draw(st.integers(0, 3)):
        targets.insert(draw(st.integers(1, len(targets))), draw(a_target()))  # the first stands for all in the envelope
    odd = draw(st.integers(0, 5)) == 0  # an envelope the model may refuse
    doc: dict[str, Any] = {
        "request_id": draw(st.sampled_from(["r-1", "r:1", "r/ü"])),
        "kind": draw(st.sampled_from(["campaign", "auto_reply", "ticket_notify"] + (["nope"] if odd else []))),
        "created_by": "ops:alice", "source_msg_uid": "m-1", "business_id": "T-1", "status_version": 2,
        "message": {"type": "text", "content": draw(st.sampled_from(
            ["Hello {name}", "Hi", "{name}{name}"] + (["{", "x" * 5000] if odd else [])))},
        "targets": {"mode": draw(st.sampled_from(["snapshot"] + (["requery", 3] if odd else []))), "items": targets},
    }
    if odd and draw(st.booleans()):
        doc["targets"]["items"] = []
    if draw(st.booleans()):
        del doc["targets"]["mode"]
    text = json.dumps(doc)
    if draw(st.integers(0, 9)) == 0:  # a key twice, in a target or at the top
        text = text.replace(draw(st.sampled_from(['"guid": ', '"kind": '])), '"guid": "g0", "guid": ', 1)
    return text.encode()


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=a_request())
def test_the_fast_path_answers_what_the_model_answers(raw: bytes) -> None:
    assert by_validate_request(raw) == by_model(raw)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=a_request())
def test_what_the_fast_path_accepts_the_model_accepts(raw: bytes) -> None:
    fast = _fast_parse(raw)
    if fast is not None:
        model = parse_request(raw)
        req, rows = fast
        assert req.model_dump(exclude={"targets"}) == model.model_dump(exclude={"targets"})
        assert [(r.guid, r.to_id, dict(r.vars)) for r in rows] == [
            (t.guid, t.to_id, t.vars) for t in model.targets.items]
        assert list(req.targets.items) == list(model.targets.items)


def test_ordinary_targets_take_the_fast_path() -> None:
    raw = json.dumps({"request_id": "r-1", "kind": "campaign", "created_by": "ops", "message": {"content": "Hi"},
                      "targets": {"items": [{"guid": f"g{i}", "to_id": f"room {i}", "vars": {"n": "é"}}
                                            for i in range(50)] + [{"guid": "g", "to_id": "t"}]}}).encode()
    fast = _fast_parse(raw)
    assert fast is not None and len(fast[1]) == 51
    valid = validate_request(raw, NOW)
    assert [key for _, _, key in valid.targets or []][:2] == ["push:r-1:g0:room%200:v0", "push:r-1:g1:room%201:v0"]
    assert valid.request.targets.items[3] == Target(guid="g3", to_id="room 3", vars={"n": "é"})


@pytest.mark.parametrize("escape", ["\\u0000", "\\ud800", "\\uDBFF", "\\uDC00"])
@pytest.mark.parametrize("where", [0, 2])
def test_escapes_the_store_cannot_hold_are_left_to_the_model(escape: str, where: int) -> None:
    items = [f'{{"guid":"g","to_id":"a{i}' + (escape if i == where else "") + '"}' for i in range(3)]
    raw = ('{"request_id":"r","kind":"campaign","created_by":"o","message":{"content":"x"},'
           '"targets":{"items":[' + ",".join(items) + ']}}').encode()
    assert _fast_parse(raw) is None
    assert by_model(raw)[0] == "refused"
    assert by_validate_request(raw) == by_model(raw)


def test_an_escaped_emoji_takes_the_fast_path_and_half_of_one_is_left_to_the_model() -> None:
    body = {"request_id": "r", "kind": "campaign", "created_by": "o", "tenant": "acme",
            "message": {"content": "Hi {n} \U0001F600"},
            "targets": {"items": [{"guid": "g", "to_id": f"room \U0001F600 {i}", "vars": {"n": "\U0001F389"}}
                                  for i in range(3)]}}
    raw = json.dumps(body).encode()  # ensure_ascii, as Python writes JSON: each emoji an escaped pair
    assert b"\\ud83d\\ude00" in raw
    fast = _fast_parse(raw)
    assert fast is not None and fast[1][0].to_id == "room \U0001F600 0"
    assert by_validate_request(raw) == by_model(raw) and by_model(raw)[0] == "accepted"
    # A backslash escaped before what looks like a pair's first half: its second half is alone,
    # here in the last target (the envelope's check reads only the first).
    head, _, tail = raw.rpartition(b"room \\ud83d")
    odd = head + b"room \\\\ud83d" + tail
    assert _fast_parse(odd) is None
    assert by_validate_request(odd) == by_model(odd)
    # Refused for another reason, such a request still names its tenant for its dead letter.
    with pytest.raises(InvalidRequest) as refused:
        validate_request(json.dumps({**body, "kind": "nope"}).encode(), NOW)
    assert refused.value.tenant == "acme"


OK = {"guid": "g1", "to_id": "t1", "vars": {"name": "n"}}
AT_AND_PAST_EACH_BOUND = [
    *({key: "x" * n} for key in ("guid", "to_id") for n in (0, 1, MAX_ID_CHARS, MAX_ID_CHARS + 1)),
    {"guid": 7}, {"to_id": None}, {"guid": ["g"]},
    {"vars": {"name": "n", **{f"v{i}": "" for i in range(MAX_VARS - 1)}}},
    {"vars": {"name": "n", **{f"v{i}": "" for i in range(MAX_VARS)}}},
    *({"vars": {"name": "n", "x" * n: ""}} for n in (0, MAX_VAR_NAME_CHARS, MAX_VAR_NAME_CHARS + 1)),
    *({"vars": {"name": "x" * n}} for n in (0, MAX_VAR_VALUE_CHARS, MAX_VAR_VALUE_CHARS + 1)),
    {"vars": {"name": 1}}, {"vars": None}, {"vars": []}, {"vars": {}}, {"extra": "x"}, {"Vars": {}},
    {"to_id": "t0"},  # the same guid and to_id as the first target
    {"guid": "é" * MAX_ID_CHARS, "to_id": "é" * MAX_ID_CHARS},  # an idempotency key past its limit
]


@pytest.mark.parametrize("change", AT_AND_PAST_EACH_BOUND)
@pytest.mark.parametrize("content", ["Hi", "Hello {name}", "{name}{name}"])
@pytest.mark.parametrize("where", [0, 1])
def test_each_target_bound_is_held_as_the_model_holds_it(change: dict[str, Any], content: str, where: int) -> None:
    odd = {**OK, **change}
    items = [{"guid": "g1", "to_id": "t0", "vars": {"name": "n"}}, {"guid": "g2", "to_id": "t2"}]
    items.insert(where, odd)
    raw = json.dumps({"request_id": "r", "kind": "campaign", "created_by": "o", "message": {"content": content},
                      "targets": {"items": items}}).encode()
    assert by_validate_request(raw) == by_model(raw)


@pytest.mark.parametrize("odd", [
    {"guid": "g1", "to_id": "t1"}, {"guid": "g1", "to_id": "t1", "extra": "x"}, {"guid": "g1", "vars": {}},
    {"to_id": "t1", "vars": {}}, {"guid": "g1"}, {}, "g1", 7, None, [], [["guid", "g1"], ["to_id", "t1"]]])
def test_a_target_of_another_shape_is_held_as_the_model_holds_it(odd: Any) -> None:
    raw = json.dumps({"request_id": "r", "kind": "campaign", "created_by": "o", "message": {"content": "Hi"},
                      "targets": {"items": [OK | {"to_id": "t0"}, odd]}}).encode()
    assert by_validate_request(raw) == by_model(raw)


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.tuples(st.text(max_size=6) | st.sampled_from(["g1", "a-b_c.d~e"]),
                                st.text(max_size=6) | st.sampled_from(["t1", "x.y"])), min_size=1, max_size=6),
       kind=st.sampled_from(["campaign", "auto_reply", "ticket_notify"]))
def test_keys_made_in_bulk_are_the_keys_made_one_by_one(pairs: list[tuple[str, str]], kind: str) -> None:
    req = parse_request(json.dumps({
        "request_id": "r/1", "kind": kind, "created_by": "o", "message": {"content": "Hi"}, "source_msg_uid": "m:1",
        "business_id": "T 1", "status_version": 3, "targets": {"items": [{"guid": "g", "to_id": "t"}]}}).encode())
    guids, to_ids = [g for g, _ in pairs], [t for _, t in pairs]
    escaped = [(quote(g, safe=""), quote(t, safe="")) for g, t in pairs]
    expected = {"campaign": [f"push:r%2F1:{g}:{t}:v0" for g, t in escaped],
                "auto_reply": [f"reply:{g}:m%3A1:{t}" for g, t in escaped],
                "ticket_notify": [f"ticket:T%201:v3:{g}:{t}" for g, t in escaped]}[kind]
    assert idem_keys(req, guids, to_ids) == expected
    assert [idem_key(req, TargetRow(Guid(g), ToId(t), {})) for g, t in pairs] == expected


def test_a_fast_path_request_reads_as_the_model_and_dumps_without_its_targets() -> None:
    raw = json.dumps({"request_id": "r", "kind": "campaign", "created_by": "o", "message": {"content": "Hi"},
                      "targets": {"items": [{"guid": "g", "to_id": "t"}, {"guid": "g", "to_id": "u",
                                                                         "vars": {"a": "b"}}]}}).encode()
    fast, model = validate_request(raw, NOW).request, parse_request(raw)
    assert fast == model and list(fast.targets.items) == list(model.targets.items)
    assert fast.targets.items[-1:] == [Target(guid="g", to_id="u", vars={"a": "b"})]
    assert fast.model_dump(mode="json", exclude={"targets"}) == model.model_dump(mode="json", exclude={"targets"})


def test_a_tags_action_is_not_held_to_the_text_limit_by_its_summary() -> None:
    """The gateway takes a tags action's ids, not its summary ("[tags.add] id,id,…", which the
    items keep for people to read): 100 ids of 65 characters make a summary over the 4,096
    characters a text may have, and the request is valid."""
    tags = [f"tag-{i:03d}-" + "x" * 57 for i in range(100)]
    raw = json.dumps({"request_id": "r-tags", "kind": "campaign", "created_by": "o",
                      "message": {"type": "tags.add", "tagIds": tags},
                      "targets": {"items": [{"guid": "g", "to_id": f"cust-{i}"} for i in range(3)]}}).encode()
    assert len(f"[tags.add] {','.join(tags)}") > 4096
    accepted = by_validate_request(raw)
    assert accepted == by_model(raw) and accepted[0] == "accepted"
    assert {content for *_, content, _ in accepted[3]} == {f"[tags.add] {','.join(tags)}"}
