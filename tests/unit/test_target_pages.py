"""Requery pages, pure: reading a page, what is refused and why, planning its items."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacer_common.domain.ids import Guid
from pacer_common.domain.requests import JobKind, JobRequest
from pacer_common.domain.validation import storable
from pacer_planner.domain.admission import page_refusal
from pacer_planner.domain.sharding import sub_of
from pacer_planner.domain.targets import Page, TargetFetchError, _kept, parse_page, plan_page, redact_url

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def requery(content: str = "Hi {name}", kind: str = "campaign", **targets: Any) -> JobRequest:
    return JobRequest.model_validate({
        "request_id": "r-1", "kind": kind, "created_by": "t", "message": {"content": content},
        "targets": {"mode": "requery", "url": "https://crm.example/audience?token=s3cret", **targets},
    })


def t(guid: str, to_id: str, **vars_: str) -> dict[str, Any]:
    return {"guid": guid, "to_id": to_id, "vars": vars_}


# -- reading a page ---------------------------------------------------------------------------

def test_a_good_page_gives_its_targets_and_next_cursor() -> None:
    page = parse_page({"items": [t("g1", "a", name="A"), t("g2", "b")], "next_cursor": "c2"}, "c1")
    assert (page.cursor_in, page.next_cursor, page.fetched, page.invalid) == ("c1", "c2", 2, 0)
    assert [(pos, x.guid, x.to_id) for pos, x in page.targets] == [(0, "g1", "a"), (1, "g2", "b")]
    assert not page.last


def test_a_null_next_cursor_is_the_last_page_and_an_empty_page_is_fine() -> None:
    page = parse_page({"items": [], "next_cursor": None}, None)
    assert page.last and page.fetched == 0 and page.targets == []


@pytest.mark.parametrize(("doc", "message"), [
    ([], "page is not a JSON object (got list)"),
    ({"next_cursor": None}, "page has no 'items' list"),
    ({"items": {}, "next_cursor": None}, "page has no 'items' list"),
    ({"items": []}, "page has no 'next_cursor' (null marks the last page)"),
    ({"items": [], "next_cursor": 5}, "'next_cursor' must be null or a non-empty string"),
    ({"items": [], "next_cursor": ""}, "'next_cursor' must be null or a non-empty string"),
    ({"items": [], "next_cursor": "x" * 5000}, "'next_cursor' must be null or a non-empty string"),
    ({"items": [], "next_cursor": "c1"}, "'next_cursor' did not advance (still 'c1')"),
])
def test_what_is_not_a_page_is_a_fetch_error_with_the_reason(doc: Any, message: str) -> None:
    with pytest.raises(TargetFetchError) as info:
        parse_page(doc, "c1")
    assert str(info.value).startswith(message)


def test_invalid_targets_are_skipped_counted_and_the_first_error_kept() -> None:
    page = parse_page({"items": [
        t("g1", "a"), {"to_id": "b"}, "nope", t("g1", ""), t("g1", "c\x00"), t("g1", "d"),
    ], "next_cursor": None}, None)
    assert [x.to_id for _, x in page.targets] == ["a", "d"]
    assert (page.fetched, page.invalid) == (6, 4)
    assert page.first_error == "items[1].guid: Field required"


@pytest.mark.parametrize(("raw", "message"), [
    ("nope", "items[0]: not an object"),
    ({"guid": "g", "to_id": 5}, "items[0].to_id: Input should be a valid string"),
    ({"guid": "g", "to_id": "x", "vars": {"a": 1}}, "items[0].vars.a: Input should be a valid string"),
    ({"guid": "g", "to_id": "x" * 300}, "items[0].to_id: String should have at most 256 characters"),
    ({"guid": "g\x00", "to_id": "x"}, "items[0].guid: contains a NUL character (\\u0000), which cannot be stored"),
])
def test_invalid_target_messages_name_the_position_and_field(raw: Any, message: str) -> None:
    assert parse_page({"items": [raw], "next_cursor": None}, None).first_error == message


@pytest.mark.parametrize(("vars_", "message"), [
    ({"a\x00b": "x"}, "items[1].vars.'a\\x00b'.[key]: contains a NUL character (\\u0000), which cannot be stored"),
    ({"a\ud800": "x"}, "items[1].vars.a\ufffd\ufffd\ufffd.[key]: is not valid Unicode text (a lone surrogate?), "
                        "which cannot be stored"),
    ({"k" * 100: 1}, "items[1].vars.'" + "k" * 64 + "'…: Input should be a valid string"),  # a page of text, cut
])
def test_a_variable_name_the_store_cannot_hold_is_quoted_in_the_error_the_page_keeps(
        vars_: dict[str, Any], message: str) -> None:
    # The page's record keeps the first error in a text column: the key as it came (a NUL)
    # failed the whole page's transaction, and the job was paused on that page for ever.
    p = plan_page(requery(), page_of(t("g", "a", name="A"), {"guid": "g", "to_id": "b", "vars": vars_},
                                     t("g", "c", name="C")), {}, 100, job_created_at=NOW)
    assert [i.to_id for i in p.items] == ["a", "c"] and p.invalid == 1
    assert p.first_error == message and storable(message)


@given(st.dictionaries(st.text(max_size=80), st.text(max_size=5) | st.integers(), min_size=1, max_size=3))
def test_whatever_a_targets_variables_are_the_error_kept_is_storable(vars_: dict[str, Any]) -> None:
    page = page_of({"guid": "g", "to_id": "a", "vars": vars_})
    p = plan_page(requery(content="hi"), page, {}, 100, job_created_at=NOW)
    assert p.first_error is None or storable(p.first_error)


def test_an_error_the_store_could_not_hold_is_kept_escaped_whole() -> None:
    assert _kept("items[0].to_id: Field required") == "items[0].to_id: Field required"
    assert _kept("items[0].vars.a\x00b: bad") == "'items[0].vars.a\\x00b: bad'"
    assert storable(_kept("x\ud800"))


def test_fields_of_a_target_other_than_guid_to_id_vars_are_ignored() -> None:
    page = parse_page({"items": [{**t("g", "a"), "name": "Ann", "score": 3}], "next_cursor": None}, None)
    assert page.invalid == 0 and page.targets[0][1].to_id == "a"


# -- planning a page ----------------------------------------------------------------------------

def page_of(*targets: dict[str, Any], nxt: str | None = None) -> Page:
    return parse_page({"items": list(targets), "next_cursor": nxt}, None)


def test_static_vars_fill_in_and_a_targets_own_vars_win() -> None:
    req = requery(content="{greet} {name}", vars={"greet": "Hello", "name": "you"})
    p = plan_page(req, page_of(t("g", "a", name="Ann"), t("g", "b")), {}, 100, job_created_at=NOW)
    assert [i.content for i in p.items] == ["Hello Ann", "Hello you"]


def test_a_target_missing_a_template_variable_is_invalid_not_blank() -> None:
    p = plan_page(requery(), page_of(t("g", "a", name="A"), t("g", "b"), t("g", "c")), {}, 100, job_created_at=NOW)
    assert [i.to_id for i in p.items] == ["a"]
    assert p.invalid == 2
    assert p.first_error == "items[1]: template variable 'name' has no value"


def test_targets_the_store_could_not_hold_are_counted_invalid_and_the_page_goes_on() -> None:
    wide = "é" * 256  # a legal guid and to_id, but together an idempotency key past the index limit
    p = plan_page(requery(content="{name}{name}"), page_of(
        t("g", "a", name="A"), t(wide, wide, name="B"), t("g", "c", name="x" * 4000), t("g", "d\x00", name="D"),
        t("g", "e\ud800", name="E"), t("g", "f", name="F")), {}, 100, job_created_at=NOW)
    assert [i.to_id for i in p.items] == ["a", "f"]
    assert p.invalid == 4
    assert p.first_error is not None and p.first_error.startswith("items[3].to_id: contains a NUL character")


def test_a_page_error_comes_before_a_render_error() -> None:
    p = plan_page(requery(), page_of(t("g", "b"), {"guid": "g"}), {}, 100, job_created_at=NOW)
    assert p.invalid == 2 and p.first_error == "items[1].to_id: Field required"


def test_a_target_repeated_within_a_page_is_a_duplicate() -> None:
    p = plan_page(requery(), page_of(t("g", "a", name="1"), t("g", "a", name="2"), t("h", "a", name="3")), {}, 100,
                  job_created_at=NOW)
    assert [(i.guid, i.to_id, i.content) for i in p.items] == [("g", "a", "Hi 1"), ("h", "a", "Hi 3")]
    assert p.duplicates == 1


def test_keys_are_those_of_a_snapshot_push() -> None:
    p = plan_page(requery(), page_of(t("g:1", "a", name="1")), {}, 100, job_created_at=NOW)
    assert p.items[0].idem_key == "push:r-1:g%3A1:a:v0"


def test_a_new_guid_gets_its_subs_from_this_page_and_a_known_guid_keeps_its_own() -> None:
    targets = [t("new", f"r{i}", name="x") for i in range(7)] + [t("old", f"s{i}", name="x") for i in range(9)]
    p = plan_page(requery(), page_of(*targets), {Guid("old"): 4}, 3, job_created_at=NOW)
    assert p.new_subs == {"new": 3}
    for it in p.items:
        assert it.sub == sub_of(it.to_id, 3 if it.guid == "new" else 4)
    assert sum(p.shards.values()) == 16 and p.per_guid == {"new": 7, "old": 9}


def test_a_new_guid_with_few_targets_on_its_first_page_keeps_one_shard() -> None:
    p = plan_page(requery(), page_of(t("g", "a", name="x")), {}, 3, job_created_at=NOW)
    assert p.new_subs == {"g": 1} and p.shards == {("g", 0): 1}


# -- admission per page ------------------------------------------------------------------------

def test_a_page_waits_when_a_guid_with_a_backlog_would_pass_the_limit() -> None:
    reason = page_refusal(JobKind.CAMPAIGN, 3, {Guid("g1"): 5, Guid("g2"): 1}, {Guid("g1"): 8}, 10)
    assert reason == ("admission refused: guid 'g1' has 8 queued items and this page adds 5, "
                      "over the limit of 10 per guid")


def test_a_page_is_admitted_within_the_limit_for_online_work_or_for_an_idle_guid() -> None:
    assert page_refusal(JobKind.CAMPAIGN, 3, {Guid("g1"): 2}, {Guid("g1"): 8}, 10) is None
    assert page_refusal(JobKind.TAKEOVER_PROMPT, 0, {Guid("g1"): 50}, {Guid("g1"): 8}, 10) is None
    # Larger than the limit on its own, but nothing queued: it must not wait forever.
    assert page_refusal(JobKind.CAMPAIGN, 3, {Guid("g1"): 50}, {}, 10) is None


# -- messages ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "shown"), [
    ("https://crm.example/audience?token=s3cret", "https://crm.example/audience"),
    ("http://user:pw@crm.example:8080/a/b#frag", "http://crm.example:8080/a/b"),
    ("http://[::1]:8080/a?k=v", "http://[::1]:8080/a"),
])
def test_urls_in_messages_lose_query_and_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown
