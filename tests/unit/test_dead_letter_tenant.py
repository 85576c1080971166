"""Whose a refused job request is when its bytes cannot be read whole: the ``tenant`` its head
names (``tenant_at_head``), read from the top-level members wholly within the first bytes only,
and never a guess: a member cut at the head's end, one nested deeper, one given twice, or no
tenant's name is no tenant. The planner's use of it: ``tests/unit/test_intake_loop.py``."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_common.domain.dead_letters import tenant_at_head, tenant_in

HEAD = 65_536


def test_the_tenant_among_the_first_members_of_bytes_that_are_no_json_is_read() -> None:
    head = b'{"request_id": "r-1", "n": 1.5, "ok": true, "tenant": "acme", "targets": {"items": [{"guid": '
    assert tenant_at_head(head + b"x" * 5 * HEAD, HEAD) == "acme"
    assert tenant_at_head(b' \n{ "tenant" :\t"acme" ,', HEAD) == "acme"
    assert tenant_at_head(b'{"tena\\u006et": "acme", ', HEAD) == "acme", "a key is read as JSON reads it"
    assert tenant_at_head(b'{"tenant": "acme"} and then something else', HEAD) == "acme"


def test_a_tenant_not_wholly_in_the_head_is_no_tenant() -> None:
    pad = b'{"pad": "' + b"x" * HEAD + b'", "tenant": "acme"}'
    assert tenant_at_head(pad, HEAD) is None, "past a member cut at the head's end"
    name = b'{"tenant": "acme-corporation"}'
    assert tenant_at_head(name, name.index(b"-")) is None, "its name cut at the head's end"
    assert tenant_at_head(b'{"request_id": "r-1", "kind": "campaign"', HEAD) is None, "absent is not the default"


def test_what_is_not_a_top_level_tenants_name_is_no_tenant() -> None:
    assert tenant_at_head(b'{"message": {"tenant": "acme"}, "x": ', HEAD) is None, "nested"
    assert tenant_at_head(b'{"tenant": "acme", "tenant": "globex", ', HEAD) is None, "twice"
    assert tenant_at_head(b'{"tenant": "acme", "x": 1, "tenant": "acme", ', HEAD) is None, "twice, alike"
    for value in (b'"Acme"', b'"a b"', b'"' + b"a" * 64 + b'"', b"7", b"null", b'["acme"]', b'""'):
        assert tenant_at_head(b'{"tenant": ' + value + b', "x": ', HEAD) is None, value
    for not_an_object in (b"", b"not json", b'["tenant", "acme"]', b'"tenant": "acme"', b'{tenant: "acme"}'):
        assert tenant_at_head(not_an_object, HEAD) is None, not_an_object


def test_hostile_heads_cost_a_bounded_read_and_name_no_tenant() -> None:
    deep = b'{"tenant": "acme", "x": ' + b"[" * HEAD
    assert tenant_at_head(deep, HEAD) == "acme"
    assert tenant_at_head(b'{"x": ' + b"[" * HEAD + b'], "tenant": "acme"}', HEAD) is None
    assert tenant_at_head(b'{"n": ' + b"9" * 10_000 + b', "tenant": "acme"}', HEAD) is None, "past an int too long"
    assert tenant_at_head(b'{"tenant": "ac\xffme", ', HEAD) is None, "bytes that are no UTF-8"


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=2_000))
def test_any_bytes_name_a_tenants_name_or_none(raw: bytes) -> None:
    tenant = tenant_at_head(raw, 1_000)
    assert tenant is None or tenant_in({"tenant": tenant}) == tenant


members = st.dictionaries(st.text(max_size=8), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8),
    max_size=6)


@settings(max_examples=300, deadline=None)
@given(body=members, tenant=st.sampled_from(["acme", "globex-2", "Not a name"]), at=st.integers(0, 6))
def test_an_object_wholly_in_the_head_names_the_tenant_a_parser_reads(body: dict[str, object], tenant: str,
                                                                       at: int) -> None:
    body.pop("tenant", None)
    items = list(body.items())
    items.insert(min(at, len(items)), ("tenant", tenant))
    raw = json.dumps(dict(items)).encode()
    assert tenant_at_head(raw, len(raw)) == tenant_in(json.loads(raw))
    assert tenant_at_head(raw + b"trailing bytes", len(raw)) == tenant_in(json.loads(raw))
