"""The fake gateway's audiences, pure: paging, caps, scheduled changes, faults."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pacer_dev.fakegateway.audiences import AudienceError, Audiences


def targets(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"guid": "g", "to_id": f"r{i}"} for i in range(start, start + n)]


def page(a: Audiences, name: str, cursor: str | None, limit: int | None) -> tuple[int, Any]:
    answer = a.page(name, cursor, limit)
    return answer.status, json.loads(answer.body)


def walk(a: Audiences, name: str, limit: int) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        status, doc = page(a, name, cursor, limit)
        assert status == 200
        pages.append([t["to_id"] for t in doc["items"]])
        cursor = doc["next_cursor"]
        if cursor is None:
            return pages


def test_pages_cover_the_audience_in_order_and_end_with_a_null_cursor() -> None:
    a = Audiences()
    a.put("x", {"targets": targets(7)})
    assert walk(a, "x", 3) == [["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6"]]
    log = a.get("x").requests
    assert [e["cursor"] for e in log] == [None, "off:3", "off:6"]
    assert [e["next_cursor"] for e in log] == ["off:3", "off:6", None]


def test_an_empty_audience_is_one_empty_last_page() -> None:
    a = Audiences()
    a.put("x", {"targets": []})
    assert page(a, "x", None, 10) == (200, {"items": [], "next_cursor": None})


def test_the_page_size_cap_serves_fewer_than_asked() -> None:
    a = Audiences()
    a.put("x", {"targets": targets(5), "page_size_cap": 2})
    assert walk(a, "x", 100) == [["r0", "r1"], ["r2", "r3"], ["r4"]]


def test_a_scheduled_change_replaces_the_targets_after_n_pages() -> None:
    a = Audiences()
    # After the first page, two targets appear in front: the next page repeats r2, r3.
    a.put("x", {"targets": targets(6), "changes": [{"after_pages": 1, "targets": targets(2, 100) + targets(6)}]})
    assert walk(a, "x", 4) == [["r0", "r1", "r2", "r3"], ["r2", "r3", "r4", "r5"]]


def test_putting_again_changes_the_audience_and_keeps_its_log() -> None:
    a = Audiences()
    a.put("x", {"targets": targets(2)})
    _, first = page(a, "x", None, 2)
    assert first["next_cursor"] is None
    a.put("x", {"targets": targets(4)})
    assert page(a, "x", "off:2", 2) == (200, {"items": targets(2, 2), "next_cursor": None})
    assert len(a.get("x").requests) == 2


@pytest.mark.parametrize(("mode", "status", "body_ok"), [("status", 503, True), ("bad_json", 200, False),
                                                         ("bad_page", 200, True)])
def test_faults_fail_the_next_k_requests_then_pages_are_served_again(mode: str, status: int, body_ok: bool) -> None:
    a = Audiences()
    a.put("x", {"targets": targets(3)})
    a.fault("x", {"fail_next": 2, "mode": mode, "status": 503})
    for _ in range(2):
        answer = a.page("x", None, 10)
        assert answer.status == status
        if body_ok:
            assert "items" not in json.loads(answer.body)
        else:
            with pytest.raises(json.JSONDecodeError):
                json.loads(answer.body)
    assert page(a, "x", None, 10)[0] == 200
    assert [e.get("fault") for e in a.get("x").requests] == [mode, mode, None]


def test_unknown_audience_and_bad_cursor() -> None:
    a = Audiences()
    assert a.page("nope", None, 1).status == 404
    a.put("x", {"targets": targets(1)})
    assert a.page("x", "42", 1).status == 400


@pytest.mark.parametrize("doc", [[], {"targets": {}}, {"targets": [], "page_size_cap": 0},
                                 {"targets": [], "other": 1}, {"targets": [], "changes": [{"targets": []}]}])
def test_bad_definitions_are_refused(doc: Any) -> None:
    with pytest.raises(AudienceError):
        Audiences().put("x", doc)


def test_a_hold_takes_the_next_k_requests_and_counts_them_until_released() -> None:
    a = Audiences()
    a.put("x", {"targets": targets(2)})
    assert not a.take_hold("x")  # nothing to hold yet
    a.hold("x", {"hold_next": 2})
    assert a.take_hold("x") and a.take_hold("x") and not a.take_hold("x")
    assert (a.get("x").view()["held"], a.get("x").view()["hold_next"]) == (2, 0)
    a.unhold("x")
    a.put("x", {"targets": targets(3)})  # redefined: the hold's count stays
    assert a.get("x").held == 1
    assert not a.take_hold("nope")


def test_a_hold_after_n_pages_lets_the_first_n_through() -> None:
    a = Audiences()
    a.put("x", {"targets": targets(5)})
    a.hold("x", {"hold_next": 1, "after_pages": 2})
    for cursor in (None, "off:1"):
        assert not a.take_hold("x")
        assert page(a, "x", cursor, 1)[0] == 200
    assert a.take_hold("x") and not a.take_hold("x")


@pytest.mark.parametrize("doc", [[], {"hold_next": -1}, {"hold_next": True}, {"hold_next": "2"},
                                 {"after_pages": -1}, {"after_pages": 1.5}])
def test_bad_holds_are_refused(doc: Any) -> None:
    a = Audiences()
    a.put("x", {"targets": []})
    with pytest.raises(AudienceError):
        a.hold("x", doc)
