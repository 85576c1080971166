"""Media items through the executor, against in-memory ports: which record a media item uses
(one per url, kind and file name per guid), and a media the gateway has forgotten (its send
refused with bad_params, and a status poll then refused too) is uploaded again, the item sent
back once to use it; a refusal of the item's own (a bad toId: the media still ready) fails
only that item, the record untouched."""

from __future__ import annotations

import asyncio
import hashlib
import random
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
from pacer_common.domain.requests import MediaMessage
from pacer_common.domain.status import ItemStatus
from pacer_sender.core import Executed, Executor
from pacer_sender.domain.media import forgotten, media_hash, upload_key

from .fakes import FakeActionGateway, FakeGateway, InMemoryActions, InMemoryItemRepository

S = ItemStatus
POLICY = RetryPolicy(max_attempts=3, base=timedelta(seconds=1), cap=timedelta(seconds=30))
URL = "https://cdn.example/x.pdf"


class World:
    """One guid's items, their jobs' messages, the store and the gateway."""

    def __init__(self, **jobs: MediaMessage) -> None:
        self.repo = InMemoryItemRepository()
        self.actions = InMemoryActions(self.repo, jobs)
        self.gw = FakeActionGateway()
        self.executor = Executor(self.repo, FakeGateway(), owner="sender-1", retry=POLICY, rng=random.Random(0),
                                 actions=self.actions, action_gateway=self.gw)
        self.n = 0

    def item(self, job: str) -> ItemCommand:
        self.n += 1
        item_id = f"it-{self.n}"
        self.repo.add(item_id)
        return ItemCommand(item_id=item_id, job_id=job, shard_id=1, guid="g-1", to_id=f"room-{self.n}",
                           content="[file]", idem_key=f"{job}:g-1:room-{self.n}", priority=3, kind="campaign")

    def run(self, cmd: ItemCommand) -> Executed:
        """Execute the item as its guid's worker does: one whose upload (or poll) made now
        found its media ready was not sent in that turn; it goes again at the guid's next."""
        result = asyncio.run(self.executor.execute(cmd))
        if result.outcome == "media_ready":
            assert result.stepped and not result.called_gateway and self.repo.items[cmd.item_id].status is S.PENDING
            result = asyncio.run(self.executor.execute(cmd))
        return result


# -- one record per url, kind and file name ------------------------------------------------

def test_the_same_url_under_another_file_name_is_uploaded_again_and_sent_under_its_own_name() -> None:
    w = World(a=MediaMessage(type="file", url=URL, fileName="Q3.pdf"),
              b=MediaMessage(type="file", url=URL, fileName="Q3-final.pdf"))
    assert w.run(w.item("a")).outcome == "confirmed"
    assert w.run(w.item("b")).outcome == "confirmed"
    assert w.run(w.item("a")).outcome == "confirmed"  # a's record still serves a's items
    assert [(s.media_id, s.file_name) for s in w.gw.sent] == [
        ("media-1", "Q3.pdf"), ("media-2", "Q3-final.pdf"), ("media-1", "Q3.pdf")]
    assert len(set(w.gw.upload_keys)) == 2, "B's upload must not carry A's idempotency key"


def test_the_same_url_as_an_image_and_as_a_file_are_two_media() -> None:
    w = World(f=MediaMessage(type="file", url=URL), i=MediaMessage(type="image", url=URL))
    assert w.run(w.item("f")).outcome == "confirmed"
    assert w.run(w.item("i")).outcome == "confirmed"
    assert [(s.kind, s.media_id) for s in w.gw.sent] == [("file", "media-1"), ("image", "media-2")]


def test_the_record_key_names_url_kind_and_file_name_and_the_first_upload_key_keeps_its_form() -> None:
    keys = {media_hash(URL, "file", "Q3.pdf"), media_hash(URL, "file", "Q3-final.pdf"),
            media_hash(URL, "file", None), media_hash(URL, "image", None), media_hash(URL + "?v=2", "file", None)}
    assert len(keys) == 5
    h = media_hash(URL, "file", "Q3.pdf")
    assert upload_key("g-1", h, 0) == f"media:g-1:{h}" and upload_key("g-1", h, 1) == f"media:g-1:{h}:1"


@given(st.text(min_size=1).map(lambda s: f"https://cdn.example/{s}"), st.sampled_from(["image", "file", "video"]),
       st.none() | st.text(min_size=1))
def test_no_new_record_key_is_the_old_url_only_key(url: str, kind: str, name: str | None) -> None:
    """Records stored before the kind and name were part of the key are never found under a new one."""
    assert media_hash(url, kind, name) != hashlib.sha256(url.encode()).hexdigest()


# -- a media the gateway has forgotten ------------------------------------------------------

def test_a_refused_media_send_makes_the_record_stale_and_the_item_uploads_again_once_and_is_sent() -> None:
    w = World(a=MediaMessage(type="image", url="https://cdn.example/p.png"))
    first, second, third = w.item("a"), w.item("a"), w.item("a")
    assert w.run(first).outcome == "confirmed"
    w.gw.forget("media-1")  # the gateway restarted
    refused = w.run(second)
    assert (refused.outcome, refused.called_gateway) == ("retry", True)
    assert w.gw.polls == ["media-1"], "the gateway was asked about the media before it was called stale"
    rec = w.repo.items[second.item_id]
    assert (rec.status, rec.error_class, rec.attempts) == (S.WAITING_RETRY, "media_refused", 0)  # attempt given back
    assert second.idem_key not in w.repo.ledger, "nothing was delivered: the key is free for the item's retry"
    (row,) = w.actions.records.values()
    assert (row.status, row.media_id) == ("stale", "media-1")
    w.repo.requeue(second.item_id)
    assert w.run(second).outcome == "confirmed"
    assert w.run(third).outcome == "confirmed"
    (row,) = w.actions.records.values()
    assert (row.status, row.media_id, row.generation) == ("ready", "media-2", 1)
    assert len(w.gw.upload_keys) == len(set(w.gw.upload_keys)) == 2  # again, under a key of its own
    assert [(s.to_id, s.media_id) for s in w.gw.sent] == [("room-1", "media-1"), ("room-2", "media-2"),
                                                          ("room-3", "media-2")]
    assert w.gw.sent[1].idem_key == second.idem_key


def test_an_item_whose_media_is_refused_again_after_uploading_it_again_fails_saying_so() -> None:
    w = World(a=MediaMessage(type="image", url="https://cdn.example/p.png"))
    w.gw.loses_uploads = True  # every send is refused
    item = w.item("a")
    assert w.run(item).outcome == "retry"
    w.repo.requeue(item.item_id)
    assert w.run(item).outcome == "failed"
    rec = w.repo.items[item.item_id]
    assert (rec.status, rec.error_class) == (S.FAILED, "bad_params")
    assert rec.error is not None and rec.error.startswith("media media-2 refused again after it was uploaded again")
    h = media_hash("https://cdn.example/p.png", "image", None)
    assert w.gw.upload_keys == [upload_key("g-1", h, 0), upload_key("g-1", h, 1)]
    assert w.gw.sent == []
    assert w.gw.polls == ["media-1", "media-2"], "each refusal was checked with a status poll"
    # The next item is not condemned by it: the poll said the media is gone, so the record is
    # stale and the next item uploads again too.
    (row,) = w.actions.records.values()
    assert row.status == "stale" and row.reason is not None and "status poll refused" in row.reason


# -- a refusal of the item's own ------------------------------------------------------------

def test_bad_targets_in_a_media_job_fail_alone_and_the_media_is_uploaded_once() -> None:
    # 40001 covers a bad toId or a dissolved room as well as an unknown mediaId: the poll says
    # the media is ready, so the refusal is the item's: it fails, and nothing is uploaded again.
    w = World(a=MediaMessage(type="image", url="https://cdn.example/p.png"))
    items = [w.item("a") for _ in range(5)]
    w.gw.bad_targets = {items[1].to_id, items[3].to_id}
    outcomes = [w.run(i).outcome for i in items]
    assert outcomes == ["confirmed", "failed", "confirmed", "failed", "confirmed"]
    assert len(w.gw.upload_keys) == 1, f"one upload for the whole job, not {len(w.gw.upload_keys)}"
    for bad in (items[1], items[3]):
        rec = w.repo.items[bad.item_id]
        assert (rec.status, rec.error_class) == (S.FAILED, "bad_params")
        assert rec.error == f"bad_params: code=40001 invalid toId {bad.to_id}", "the gateway's own message"
        assert ("ItemRetryScheduled", "media_refused") not in rec.events, "not sent back to upload again"
    (row,) = w.actions.records.values()
    assert (row.status, row.media_id) == ("ready", "media-1"), "the record is untouched"
    assert [s.to_id for s in w.gw.sent] == [items[0].to_id, items[2].to_id, items[4].to_id]
    assert w.gw.polls == ["media-1", "media-1"]


def test_a_refusal_whose_status_poll_fails_for_another_reason_is_the_items_own() -> None:
    # The poll says nothing about the media (a transport failure, a 5xx): the media is not
    # called stale on no evidence; the item fails as the send's bad_params said.
    w = World(a=MediaMessage(type="image", url="https://cdn.example/p.png"))
    first, second = w.item("a"), w.item("a")
    assert w.run(first).outcome == "confirmed"
    w.gw.forget("media-1")
    w.gw.poll_errors = [SendError(FailureClass.RETRYABLE, None, "HTTP 503 from gateway")]
    assert w.run(second).outcome == "failed"
    rec = w.repo.items[second.item_id]
    assert (rec.status, rec.error_class) == (S.FAILED, "bad_params")
    (row,) = w.actions.records.values()
    assert (row.status, row.media_id) == ("ready", "media-1")
    assert len(w.gw.upload_keys) == 1


def test_only_a_poll_refused_with_the_gateways_bad_params_or_a_failed_media_says_the_media_is_gone() -> None:
    assert forgotten(None, SendError(FailureClass.BAD_PARAMS, 40001, "no media m-1"))
    assert forgotten("failed", None)
    assert not forgotten("ready", None) and not forgotten("pending", None)
    assert not forgotten(None, SendError(FailureClass.RETRYABLE, None, "HTTP 503 from gateway"))
    assert not forgotten(None, SendError(FailureClass.BAD_PARAMS, None, "HTTP 400 from a proxy, no code"))
