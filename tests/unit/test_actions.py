"""Job messages beyond text (media, tags, customer sync) and when a media item may be sent."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacer_common.domain.requests import MediaMessage, SyncMessage, TagsMessage, TextMessage
from pacer_common.domain.validation import InvalidRequest, validate_request
from pacer_sender.domain.media import MediaRow, MediaTiming, next_generation, next_step, upload_key

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
T = MediaTiming(poll_after=timedelta(seconds=30), poll_every=timedelta(seconds=10), recheck=timedelta(seconds=2))


def req(message: dict[str, object], to: list[str] | None = None) -> bytes:
    return json.dumps({"request_id": "r-1", "kind": "campaign", "created_by": "t", "message": message,
                       "targets": {"items": [{"guid": "g", "to_id": t} for t in (to or ["c1", "c2"])]}}).encode()


@pytest.mark.parametrize(("message", "cls", "content"), [
    ({"content": "Hi {x}"}, TextMessage, None),
    ({"type": "image", "url": "https://cdn.example/a{b}.png"}, MediaMessage, "[image] https://cdn.example/a{b}.png"),
    ({"type": "file", "url": "https://cdn.example/x.pdf", "fileName": "x.pdf"}, MediaMessage, "[file] x.pdf"),
    ({"type": "tags.add", "tagIds": ["t1", "t2"]}, TagsMessage, "[tags.add] t1,t2"),
    ({"type": "tags.remove", "tagIds": ["t1"]}, TagsMessage, "[tags.remove] t1"),
    ({"type": "customer.sync"}, SyncMessage, "[customer.sync]"),
])
def test_each_message_type_is_accepted_and_only_text_is_a_template(message: dict[str, object], cls: type,
                                                                   content: str | None) -> None:
    if cls is TextMessage:
        with pytest.raises(InvalidRequest, match="template variable 'x' has no value"):
            validate_request(req(message), NOW)
        return
    v = validate_request(req(message), NOW)
    assert isinstance(v.request.message, cls)
    assert v.targets is not None and {c for _, c, _ in v.targets} == {content}  # braces in a url are no field
    assert v.template_fields == []


@pytest.mark.parametrize(("message", "reason"), [
    ({"type": "video"}, "message.url: Field required"),
    ({"type": "image", "url": "ftp://x.example/a.png"}, "message.url: String should match pattern"),
    ({"type": "image", "url": "https://x.example/a.png", "content": "hi"}, "message.content: Extra inputs"),
    ({"type": "tags.add", "tagIds": []}, "message.tagIds: List should have at least 1 item"),
    ({"type": "customer.sync", "tagIds": ["x"]}, "message.tagIds: Extra inputs"),
    ({"type": "sticker", "url": "https://x.example/a.png"}, "'type' must be 'text', 'image', 'file', 'video'"),
])
def test_a_bad_message_is_refused_naming_the_field(message: dict[str, object], reason: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        validate_request(req(message), NOW)
    assert reason in str(exc.value)


def row(status: str, uploaded_s_ago: float, checked_s_ago: float | None = None) -> MediaRow:
    return MediaRow("m-1", status, None, NOW - timedelta(seconds=uploaded_s_ago),  # type: ignore[arg-type]
                    None if checked_s_ago is None else NOW - timedelta(seconds=checked_s_ago))


def test_a_media_not_yet_uploaded_is_uploaded_and_a_settled_one_is_sent_or_failed() -> None:
    assert next_step(None, NOW, T) == ("upload", None)
    assert next_step(row("ready", 1), NOW, T) == ("send", None)
    assert next_step(row("failed", 1), NOW, T) == ("fail", None)


def test_a_pending_media_waits_for_its_callback_then_is_polled_at_most_every_poll_every() -> None:
    assert next_step(row("pending", 5), NOW, T) == ("wait", NOW + timedelta(seconds=2))
    assert next_step(row("pending", 29), NOW, T) == ("wait", NOW + timedelta(seconds=1))  # not past poll_after
    assert next_step(row("pending", 30), NOW, T) == ("poll", None)
    assert next_step(row("pending", 60, checked_s_ago=3), NOW, T) == ("wait", NOW + timedelta(seconds=2))
    assert next_step(row("pending", 60, checked_s_ago=10), NOW, T) == ("poll", None)


def test_an_upload_older_than_its_reuse_is_made_again_as_the_next_generation_with_its_own_key() -> None:
    reuse = T.reuse.total_seconds()
    for status in ("ready", "failed", "pending"):
        assert next_step(row(status, reuse - 1), NOW, T)[0] != "upload"
        assert next_step(row(status, reuse), NOW, T) == ("upload", None)
    assert next_generation(None) == 0
    assert next_generation(replace(row("ready", 1), generation=4)) == 5
    assert upload_key("g", "h", 0) == "media:g:h"  # the first upload's key, as it has always been
    assert len({upload_key("g", "h", n) for n in range(5)}) == 5


@given(st.floats(0, 1000), st.none() | st.floats(0, 1000))
def test_a_pending_media_is_never_sent_and_never_waits_past_its_next_poll(up: float, checked: float | None) -> None:
    step, until = next_step(row("pending", up, checked), NOW, T)
    assert step in ("wait", "poll")
    if step == "wait":
        assert until is not None and NOW < until <= NOW + T.recheck
