"""Planning a job request: shards, rendered items, refusals, idempotency keys, job ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pacer_common.domain.requests import JobRequest
from pacer_planner.domain.planning import PlanError, plan, render
from pacer_planner.domain.targets import parse_page, plan_page

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

KIND_FIELDS: dict[str, dict[str, Any]] = {
    "takeover_prompt": {},
    "auto_reply": {"source_msg_uid": "msg-1"},
    "ticket_notify": {"business_id": "T-1", "status_version": 3},
    "campaign": {},
}


def target(guid: str, to_id: str, **vars_: str) -> dict[str, Any]:
    return {"guid": guid, "to_id": to_id, "vars": vars_}


def req(targets: list[dict[str, Any]] | None = None, *, kind: str = "campaign", content: str = "Hello {name}",
        **fields: Any) -> JobRequest:
    data: dict[str, Any] = {
        "request_id": "campaign-2026-11-29-001",
        "kind": kind,
        "created_by": "ops:alice",
        "message": {"type": "text", "content": content},
        "content_version": 1,
        "targets": {"mode": "snapshot", "items": targets or [target("g-001", "room-123", name="A")]},
        "expire_at": "2026-11-29T20:00:00Z",
        **KIND_FIELDS[kind],
    }
    data.update(fields)
    return JobRequest.model_validate({k: v for k, v in data.items() if v is not None})


# -- shards and items ----------------------------------------------------------------------

def test_one_shard_per_guid_with_its_item_count() -> None:
    p = plan(req([
        target("g1", "a", name="1"), target("g2", "a", name="2"), target("g1", "b", name="3"),
        target("g3", "a", name="4"), target("g1", "c", name="5"),
    ]), NOW)
    assert p.shards == {("g1", 0): 3, ("g2", 0): 1, ("g3", 0): 1}
    assert p.per_guid == {"g1": 3, "g2": 1, "g3": 1}
    assert p.subs == {"g1": 1, "g2": 1, "g3": 1}
    assert sum(p.shards.values()) == len(p.items) == 5


def test_items_follow_target_order_and_carry_guid_and_to_id() -> None:
    targets = [target("g2", "x", name="X"), target("g1", "y", name="Y"), target("g2", "z", name="Z")]
    p = plan(req(targets), NOW)
    assert [(i.guid, i.to_id) for i in p.items] == [("g2", "x"), ("g1", "y"), ("g2", "z")]


def test_each_item_is_rendered_with_its_own_vars() -> None:
    p = plan(req([target("g1", "a", name="Ann"), target("g1", "b", name="Bob")],
                 content="Hi {name}, order {name}!"), NOW)
    assert [i.content for i in p.items] == ["Hi Ann, order Ann!", "Hi Bob, order Bob!"]


def test_template_without_placeholders_is_sent_as_is_and_extra_vars_are_ignored() -> None:
    p = plan(req([target("g1", "a", unused="x")], content="Plain text"), NOW)
    assert p.items[0].content == "Plain text"


def test_a_text_the_targets_share_is_the_jobs_and_items_rendered_alike_store_none() -> None:
    p = plan(req([target("g1", "a"), target("g2", "b", unused="x")], content="Plain {{text}}"), NOW)
    assert p.item_content == "Plain {text}"
    assert [p.stored_content(i) for i in p.items] == [None, None]
    per_target = plan(req([target("g1", "a", name="Ann"), target("g1", "b", name="Bob")]), NOW)
    assert per_target.item_content is None  # each target's own text: every item keeps its own
    assert [per_target.stored_content(i) for i in per_target.items] == ["Hello Ann", "Hello Bob"]


def test_a_snapshots_targets_giving_the_same_value_share_the_text_most_of_them_render() -> None:
    p = plan(req([target("g1", "a", name="all"), target("g1", "b", name="Bob"), target("g2", "c", name="all")]),
             NOW)
    assert p.item_content == "Hello all"
    assert [p.stored_content(i) for i in p.items] == [None, "Hello Bob", None]


def test_a_requery_shares_its_text_rendered_with_the_static_vars_and_an_override_differs() -> None:
    request = JobRequest.model_validate({
        **req().model_dump(mode="json", exclude={"targets", "message"}), "message": {"content": "Hi from {brand}"},
        "targets": {"mode": "requery", "url": "https://crm.example/audience", "vars": {"brand": "Pacer"}}})
    p = plan(request, NOW)
    assert p.item_content == "Hi from Pacer"
    # A page's items render with the static vars unless a target overrides one; which of them
    # store no text is decided in SQL against the job's stored text (test_target_sets).
    page = parse_page({"items": [target("g1", "a"), target("g1", "b", brand="Other")], "next_cursor": None}, None)
    items = plan_page(request, page, {}, 100, job_created_at=NOW).items
    assert [i.content for i in items] == ["Hi from Pacer", "Hi from Other"]


def test_a_media_message_shares_its_summary() -> None:
    p = plan(req([target("g1", "a"), target("g1", "b")], message={"type": "image", "url": "https://cdn.example/a.png"}),
             NOW)
    assert p.item_content == "[image] https://cdn.example/a.png"
    assert [p.stored_content(i) for i in p.items] == [None, None]


def test_doubled_braces_render_as_literal_braces() -> None:
    assert render("{{literal}} {name}", {"name": "A"}) == "{literal} A"


def test_item_ids_are_unique() -> None:
    p = plan(req([target("g1", str(n), name="n") for n in range(50)]), NOW)
    assert len({i.item_id for i in p.items}) == 50


def test_plan_priority_is_the_requests_effective_priority() -> None:
    assert plan(req(kind="takeover_prompt"), NOW).priority < plan(req(kind="campaign"), NOW).priority
    assert plan(req(kind="campaign", priority=0), NOW).priority == 0


# -- refusals ------------------------------------------------------------------------------

def test_missing_variable_names_the_target_index_and_the_variable() -> None:
    targets = [target("g1", "a", name="A"), target("g1", "b", name="B"), target("g2", "c", nom="C")]
    with pytest.raises(PlanError) as info:
        plan(req(targets, content="Hello {name}"), NOW)
    assert "targets[2]" in str(info.value)
    assert "'name'" in str(info.value)


def test_render_raises_on_a_missing_variable_instead_of_rendering_blank() -> None:
    with pytest.raises(KeyError):
        render("Hello {name}", {})


def test_duplicate_guid_and_to_id_names_both_positions() -> None:
    targets = [target("g1", "a", name="1"), target("g2", "a", name="2"), target("g1", "a", name="3")]
    with pytest.raises(PlanError) as info:
        plan(req(targets), NOW)
    msg = str(info.value)
    assert "targets[0]" in msg and "targets[2]" in msg
    assert "g1" in msg and "'a'" in msg


def test_same_to_id_on_different_guids_is_not_a_duplicate() -> None:
    p = plan(req([target("g1", "room", name="1"), target("g2", "room", name="2")]), NOW)
    assert len(p.items) == 2


@pytest.mark.parametrize("expire_at", [NOW - timedelta(seconds=1), NOW])
def test_request_expired_at_or_before_planning_time_is_refused(expire_at: datetime) -> None:
    with pytest.raises(PlanError, match="expired"):
        plan(req(expire_at=expire_at.isoformat()), NOW)


def test_request_without_expiry_is_planned() -> None:
    r = req()
    r = r.model_copy(update={"expire_at": None})
    assert len(plan(r, NOW).items) == 1


@pytest.mark.parametrize("content", ["Hello {", "Hello }", "Hello {}", "Hello {0}", "Hi {name!z}", "Hi {name:d}"])
def test_malformed_template_is_a_plan_error(content: str) -> None:
    with pytest.raises(PlanError):
        plan(req(content=content), NOW)


@pytest.mark.parametrize("content", ["Hi {name[x]}", "Hi {name.nope}"])
def test_template_field_lookup_errors_are_plan_errors_not_crashes(content: str) -> None:
    # A request is untrusted input: anything wrong with its template must come back as a
    # PlanError (dead-lettered), never as a stray exception that stops the planner.
    with pytest.raises(PlanError):
        plan(req(content=content), NOW)


# -- idempotency keys ---------------------------------------------------------------------

def keys(p: Any) -> list[str]:
    return [i.idem_key for i in p.items]


@pytest.mark.parametrize("kind", list(KIND_FIELDS))
def test_every_item_of_a_request_has_its_own_key(kind: str) -> None:
    targets = [target(g, t, name="n") for g in ("g1", "g2") for t in ("a", "b", "c")]
    p = plan(req(targets, kind=kind), NOW)
    assert len(set(keys(p))) == len(p.items)


@pytest.mark.parametrize("kind", list(KIND_FIELDS))
def test_distinct_targets_never_share_a_key_even_with_separator_characters(kind: str) -> None:
    # (guid "a:b", to "c") and (guid "a", to "b:c") are different sends to different people.
    p = plan(req([target("a:b", "c", name="1"), target("a", "b:c", name="2")], kind=kind), NOW)
    assert len(set(keys(p))) == 2


def test_auto_replies_to_different_messages_and_people_never_share_a_key() -> None:
    a = plan(req([target("g1", "t", name="1")], kind="auto_reply", request_id="r-1", source_msg_uid="m:x"), NOW)
    b = plan(req([target("g1", "x:t", name="1")], kind="auto_reply", request_id="r-2", source_msg_uid="m"), NOW)
    assert keys(a) != keys(b)


def test_replanning_the_same_request_gives_the_same_keys() -> None:
    r = req([target("g1", "a", name="1"), target("g2", "b", name="2")])
    assert keys(plan(r, NOW)) == keys(plan(r, NOW))


def test_campaign_key_depends_on_request_target_and_content_version() -> None:
    base = keys(plan(req(), NOW))
    assert keys(plan(req(request_id="campaign-2"), NOW)) != base
    assert keys(plan(req(content_version=2), NOW)) != base
    assert keys(plan(req([target("g-001", "room-999", name="A")]), NOW)) != base
    assert keys(plan(req([target("g-002", "room-123", name="A")]), NOW)) != base


def test_campaign_key_ignores_wording_changes_within_a_content_version() -> None:
    assert keys(plan(req(content="Hi {name}"), NOW)) == keys(plan(req(content="Hello {name}"), NOW))


def test_auto_reply_key_is_guid_and_answered_message_not_request() -> None:
    a = plan(req(kind="auto_reply", request_id="r-1", source_msg_uid="m-1"), NOW)
    b = plan(req(kind="auto_reply", request_id="r-2", source_msg_uid="m-1", content_version=9), NOW)
    c = plan(req(kind="auto_reply", request_id="r-1", source_msg_uid="m-2"), NOW)
    assert keys(a) == keys(b)
    assert keys(a) != keys(c)
    assert "m-1" in keys(a)[0] and "g-001" in keys(a)[0]


def test_two_ticket_requests_for_the_same_status_version_share_keys() -> None:
    """The point of the ledger: a re-submitted notification under a new request id is the same send."""
    a = plan(req(kind="ticket_notify", request_id="r-1", business_id="T-9", status_version=4), NOW)
    b = plan(req(kind="ticket_notify", request_id="r-2", business_id="T-9", status_version=4,
                 content_version=7, content="Other wording {name}"), NOW)
    assert keys(a) == keys(b)


def test_ticket_key_changes_with_status_version_business_id_or_target() -> None:
    base = keys(plan(req(kind="ticket_notify", business_id="T-9", status_version=4), NOW))
    assert keys(plan(req(kind="ticket_notify", business_id="T-9", status_version=5), NOW)) != base
    assert keys(plan(req(kind="ticket_notify", business_id="T-8", status_version=4), NOW)) != base
    other_target = [target("g-001", "room-456", name="A")]
    assert keys(plan(req(other_target, kind="ticket_notify", business_id="T-9", status_version=4), NOW)) != base


def test_different_kinds_for_the_same_target_do_not_share_keys() -> None:
    by_kind = {kind: keys(plan(req(kind=kind), NOW))[0] for kind in KIND_FIELDS}
    # takeover_prompt and campaign both key on request id (one request id is one job, so one
    # kind); the kinds with a business identity of their own must not meet a push key.
    assert len({by_kind["auto_reply"], by_kind["ticket_notify"], by_kind["campaign"]}) == 3


# -- job id --------------------------------------------------------------------------------

def test_job_id_is_stable_for_a_republished_request() -> None:
    a = plan(req(), NOW)
    b = plan(req(content="Changed {name}", content_version=5), NOW + timedelta(minutes=1))
    assert a.job_id == b.job_id
    assert a.items[0].item_id != b.items[0].item_id


def test_different_request_ids_get_different_job_ids() -> None:
    assert plan(req(request_id="r-1"), NOW).job_id != plan(req(request_id="r-2"), NOW).job_id


# -- requery -------------------------------------------------------------------------------

def requery(content: str = "Hello {name}") -> JobRequest:
    return JobRequest.model_validate({
        "request_id": "campaign-2026-11-29-001", "kind": "campaign", "created_by": "ops:alice",
        "message": {"type": "text", "content": content},
        "targets": {"mode": "requery", "url": "https://crm.example/audience"},
    })


def test_a_requery_request_is_planned_as_a_job_without_items() -> None:
    p = plan(requery(), NOW)
    assert (p.items, p.shards, p.per_guid) == ([], {}, {})
    assert p.job_id == plan(req(), NOW).job_id


def test_a_requery_request_with_a_broken_template_is_refused_up_front() -> None:
    with pytest.raises(PlanError):
        plan(requery("Hi {"), NOW)


def item_id_time(item_id: str) -> datetime:
    """The time stamped in a version 7 item id (its first 48 bits: Unix milliseconds)."""
    return datetime.fromtimestamp(int(item_id.replace("-", "")[:12], 16) / 1000, UTC)


def test_item_ids_are_distinct_canonical_version_7_uuids_stamped_with_the_jobs_creation_time() -> None:
    import uuid

    from pacer_common.domain.ids import new_item_ids

    at = datetime(2026, 11, 30, 23, 59, 59, 999000, tzinfo=UTC)
    ids = new_item_ids(5000, at)
    parsed = [uuid.UUID(i) for i in ids]
    assert len(set(ids)) == 5000
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 and str(u) == i for u, i in zip(parsed, ids, strict=True))
    assert {item_id_time(i) for i in ids} == {at}
    # ordered by time first: every id of a later job sorts after every id of an earlier one
    later = new_item_ids(100, at + timedelta(milliseconds=1))
    assert max(parsed) < min(uuid.UUID(i) for i in later)
    assert new_item_ids(0, at) == []


def test_a_plan_stamps_every_item_with_the_jobs_creation_time() -> None:
    p = plan(req(), NOW)
    assert p.created_at == NOW and p.items
    assert {item_id_time(it.item_id) for it in p.items} == {NOW}


def test_a_ticket_held_for_coalescing_is_held_only_where_it_can_still_go_out_after() -> None:
    window = timedelta(seconds=3)
    held = plan(req(kind="ticket_notify", expire_at=(NOW + timedelta(minutes=5)).isoformat()), NOW, window)
    assert held.not_before == NOW + window and held.coalesce == ("T-1", 3)
    # Expiring within the window: held, it could only expire; it goes out without the wait.
    short = plan(req(kind="ticket_notify", expire_at=(NOW + timedelta(seconds=2)).isoformat()), NOW, window)
    assert short.not_before is None and short.coalesce == ("T-1", 3)


@pytest.mark.parametrize("content", ["{name}", " {name} ", "{name}{other}"])
def test_a_target_whose_message_renders_blank_is_refused_by_name(content: str) -> None:
    targets = [target("g1", "a", name="A", other=""), target("g1", "b", name=" ", other="")]
    with pytest.raises(PlanError) as info:
        plan(req(targets, content=content), NOW)
    assert "targets[1]: the rendered message is blank" in str(info.value)
    # Text around the fields is never blank: blank variables are the target's own business.
    assert len(plan(req(targets, content="Hi {name}{other}"), NOW).items) == 2
