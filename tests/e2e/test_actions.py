"""Every gateway action end to end, as items through the same claim, lease, ledger and pacing.

Media: one upload per media per guid, items wait visibly until the media is ready (a
media.ready callback, or a /media/status poll when the callback is lost), a failed upload
fails the items with its reason, so does a media the gateway forgot, an upload older than
the reuse window is made again, and no send is ever made into media that is not ready.
Customers: tags add/remove are idempotent; concurrent syncs of one customer take effect once,
the newest version winning."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from pacer_common.kafka import make_producer, produce_all
from pacer_dev.infra import Infra
from pacer_dev.stack import Stack
from tests.conftest import stack_on
from tests.e2e.conftest import gateway
from tests.e2e.helpers import job_state, publish, sends_for
from tests.integration.helpers import wait_for


@pytest.fixture(scope="module")
def stack(infra_env: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_on(infra_env, tmp_path_factory.mktemp("stack"), f"m{uuid.uuid4().hex[:10]}", {
        "PACER_SENDER_MIN_INTERVAL_MS": "10",
        "PACER_SENDER_JITTER_MS": "5",
        "PACER_RECONCILER_SWEEP_INTERVAL_S": "0.5",
        "PACER_SENDER_MEDIA_POLL_AFTER_S": "3",
        "PACER_SENDER_MEDIA_POLL_EVERY_S": "1",
        "PACER_SENDER_MEDIA_RECHECK_S": "0.5",
        "PACER_SENDER_SWEEP_S": "2",  # a guid back online is started again within seconds
    }) as st:
        st.start_gateway(wait=False)
        st.start_services("planner", "reconciler", "sender")
        yield st


def media_job(guid: str, n: int, url: str, kind: str = "image", name: str = "poster.png") -> dict[str, object]:
    return {"request_id": f"media-{uuid.uuid4().hex[:10]}", "kind": "campaign", "created_by": "test",
            "message": {"type": kind, "url": url, "fileName": name},
            "targets": {"mode": "snapshot", "items": [{"guid": guid, "to_id": f"room-{i}"} for i in range(n)]},
            "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}


def db(stack: Stack, sql: str, *args: object) -> list[tuple]:
    with psycopg.connect(stack.infra.database_url) as conn:
        return conn.execute(sql, args).fetchall()


def completed(stack: Stack, rid: str) -> dict[str, int] | None:
    s = job_state(stack, rid)
    return s[1] if s and s[0] == "completed" else None


def test_a_media_whose_readiness_callback_is_lost_is_resolved_by_polling(stack: Stack) -> None:
    guid = f"mg-{uuid.uuid4().hex[:6]}"
    gateway(stack, "/_admin/actions", "PUT", {"media_ready_after_ms": 1500})
    uploads = gateway(stack, "/_admin/actions")["uploads"]
    job = media_job(guid, 5, f"https://cdn.example/{guid}/poster.png")
    publish(stack, json.dumps(job).encode())
    # Waiting, visibly: pending with the reason, nothing sent.
    wait_for(lambda: db(stack, "SELECT count(*) FROM items WHERE guid = %s AND status = 'pending' AND "
                               "last_error_class = 'media_pending' AND last_error LIKE 'waiting for image%%'",
                        guid)[0][0] >= 1, 60, "an item waiting for its media")
    counts = wait_for(lambda: completed(stack, str(job["request_id"])), 90, "the media job to complete")
    assert counts == {"confirmed": 5}
    sends = sends_for(stack, guid)
    assert len(sends) == len({s["idempotencyKey"] for s in sends}) == 5
    assert all(s["content"].startswith("image:media-") for s in sends)
    stats = gateway(stack, "/_admin/actions")
    assert stats["uploads"] - uploads == 1, "one upload for the media, not one per target"
    assert stats["sends_unready"] == 0, "a send was made into media not ready"
    assert stats["status_polls"] >= 1
    assert db(stack, "SELECT status, settled_by FROM media WHERE guid = %s", guid) == [("ready", "poll")]


def test_a_media_ready_callback_releases_the_items_without_a_poll(stack: Stack) -> None:
    producer = make_producer({"bootstrap.servers": stack.infra.kafka_bootstrap})
    topic = f"{stack.topic_prefix}.callbacks"

    def callback(guid: str, cmd: str, data: dict[str, object]) -> None:
        body = {"cmd": cmd, "guid": guid, "ts": datetime.now(UTC).isoformat(), "data": data}
        produce_all(producer, [(topic, guid.encode(), json.dumps(body).encode(), None)])

    # The callbacks consumer has joined its group and reads promptly.
    probe = f"probe-{uuid.uuid4().hex[:6]}"
    callback(probe, "device.status", {"status": "online"})
    wait_for(lambda: db(stack, "SELECT 1 FROM guid_states WHERE guid = %s", probe), 60, "the callbacks consumer")

    guid = f"mc-{uuid.uuid4().hex[:6]}"
    gateway(stack, "/_admin/actions", "PUT", {"media_ready_after_ms": 3_600_000})  # pending until settled
    job = media_job(guid, 3, f"https://cdn.example/{guid}/clip.mp4", "video")
    publish(stack, json.dumps(job).encode())
    (media_id,) = wait_for(lambda: next(iter(db(stack, "SELECT media_id FROM media WHERE guid = %s", guid)), None),
                           60, "the upload")
    gateway(stack, f"/_admin/media/{media_id}", "PUT", {"status": "ready"})
    callback(guid, "media.ready", {"mediaId": media_id, "ok": True})
    assert wait_for(lambda: completed(stack, str(job["request_id"])), 60, "the job") == {"confirmed": 3}
    assert db(stack, "SELECT status, settled_by FROM media WHERE guid = %s", guid) == [("ready", "callback")]
    assert gateway(stack, "/_admin/actions")["sends_unready"] == 0


def test_a_failed_upload_fails_the_items_with_its_reason(stack: Stack) -> None:
    guid = f"mf-{uuid.uuid4().hex[:6]}"
    gateway(stack, "/_admin/actions", "PUT", {"media_ready_after_ms": 0})
    job = media_job(guid, 3, f"https://cdn.example/{guid}/fail-upload.pdf", "file")
    publish(stack, json.dumps(job).encode())
    assert wait_for(lambda: completed(stack, str(job["request_id"])), 60, "the job") == {"failed": 3}
    reasons = {r[0] for r in db(stack, "SELECT last_error FROM items WHERE guid = %s", guid)}
    assert reasons == {"media upload failed: could not fetch the url"}
    assert sends_for(stack, guid) == []


def test_a_media_the_gateway_no_longer_knows_fails_its_items_at_the_status_poll(stack: Stack) -> None:
    guid = f"mg-{uuid.uuid4().hex[:6]}"
    gateway(stack, "/_admin/actions", "PUT", {"media_ready_after_ms": 3_600_000})  # no callback will come
    job = media_job(guid, 2, f"https://cdn.example/{guid}/gone.png")
    publish(stack, json.dumps(job).encode())
    (media_id,) = wait_for(lambda: next(iter(db(stack, "SELECT media_id FROM media WHERE guid = %s", guid)), None),
                           60, "the upload")
    gateway(stack, f"/_admin/media/{media_id}", "DELETE")
    assert wait_for(lambda: completed(stack, str(job["request_id"])), 60, "the job") == {"failed": 2}
    reasons = {r[0] for r in db(stack, "SELECT last_error FROM items WHERE guid = %s", guid)}
    assert len(reasons) == 1
    (reason,) = reasons
    assert reason.startswith("media upload failed: status poll refused") and media_id in reason, reason
    assert db(stack, "SELECT status, settled_by FROM media WHERE guid = %s", guid) == [("failed", "poll")]
    assert sends_for(stack, guid) == []


def test_a_media_uploaded_longer_ago_than_its_reuse_is_uploaded_again_under_a_key_of_its_own(stack: Stack) -> None:
    guid = f"mr-{uuid.uuid4().hex[:6]}"
    url = f"https://cdn.example/{guid}/weekly.png"
    gateway(stack, "/_admin/actions", "PUT", {"media_ready_after_ms": 0})
    first = media_job(guid, 2, url)
    publish(stack, json.dumps(first).encode())
    assert wait_for(lambda: completed(stack, str(first["request_id"])), 60, "the first job") == {"confirmed": 2}
    (old,) = db(stack, "UPDATE media SET uploaded_at = now() - interval '3 days' WHERE guid = %s "
                       "RETURNING media_id", guid)  # three days on: WeCom has forgotten it
    uploads = gateway(stack, "/_admin/actions")["uploads"]
    second = media_job(guid, 2, url)
    publish(stack, json.dumps(second).encode())
    assert wait_for(lambda: completed(stack, str(second["request_id"])), 60, "the second job") == {"confirmed": 2}
    ((new, generation, status),) = db(stack, "SELECT media_id, generation, status FROM media WHERE guid = %s", guid)
    assert (generation, status) == (1, "ready") and new != old[0]
    assert gateway(stack, "/_admin/actions")["uploads"] - uploads == 1, "one upload again, not one per target"
    assert sorted(s["content"] for s in sends_for(stack, guid)) == sorted([f"image:{old[0]}"] * 2 + [f"image:{new}"] * 2)


def test_one_url_under_another_file_name_or_kind_is_uploaded_again_and_sent_as_itself(stack: Stack) -> None:
    guid = f"mn-{uuid.uuid4().hex[:6]}"
    url = f"https://cdn.example/{guid}/x.pdf"
    gateway(stack, "/_admin/actions", "PUT", {"media_ready_after_ms": 0})
    before = gateway(stack, "/_admin/actions")
    for kind, name in (("file", "Q3.pdf"), ("file", "Q3-final.pdf"), ("image", "Q3.pdf")):
        job = media_job(guid, 2, url, kind, name)
        publish(stack, json.dumps(job).encode())
        rid = str(job["request_id"])
        assert wait_for(lambda rid=rid: completed(stack, rid), 60, f"the {kind} {name} job") == {"confirmed": 2}
    media = {(k, n): m for k, n, m in db(stack, "SELECT kind, file_name, media_id FROM media WHERE guid = %s", guid)}
    assert set(media) == {("file", "Q3.pdf"), ("file", "Q3-final.pdf"), ("image", "Q3.pdf")}
    assert len(set(media.values())) == 3
    assert sorted(s["content"] for s in sends_for(stack, guid)) == sorted(
        f"{k}:{m}" for (k, _), m in media.items() for _ in range(2)), "each job's items sent its own media"
    after = gateway(stack, "/_admin/actions")
    assert after["uploads"] - before["uploads"] == 3
    assert after["sends_unready"] == before["sends_unready"], "a send was refused"


def test_a_media_the_gateway_forgot_after_it_was_ready_is_uploaded_again_and_its_items_sent(stack: Stack) -> None:
    guid = f"mz-{uuid.uuid4().hex[:6]}"
    url = f"https://cdn.example/{guid}/banner.png"
    gateway(stack, "/_admin/actions", "PUT", {"media_ready_after_ms": 0})
    first = media_job(guid, 2, url)
    publish(stack, json.dumps(first).encode())
    assert wait_for(lambda: completed(stack, str(first["request_id"])), 60, "the first job") == {"confirmed": 2}
    ((old,),) = db(stack, "SELECT media_id FROM media WHERE guid = %s", guid)
    gateway(stack, f"/_admin/media/{old}", "DELETE")  # the gateway restarted: it no longer knows the media
    uploads = gateway(stack, "/_admin/actions")["uploads"]
    second = media_job(guid, 3, url)
    publish(stack, json.dumps(second).encode())
    assert wait_for(lambda: completed(stack, str(second["request_id"])), 90, "the second job") == {"confirmed": 3}
    ((new, generation, status),) = db(stack, "SELECT media_id, generation, status FROM media WHERE guid = %s", guid)
    assert (generation, status) == (1, "ready") and new != old
    assert gateway(stack, "/_admin/actions")["uploads"] - uploads == 1, "one upload again, not one per item"
    assert sorted(s["content"] for s in sends_for(stack, guid)) == sorted([f"image:{old}"] * 2 + [f"image:{new}"] * 3)
    ((sent_back,),) = db(stack, "SELECT count(DISTINCT item_id) FROM item_events WHERE guid = %s"
                                " AND type = 'ItemRetryScheduled' AND payload ->> 'error_class' = 'media_refused'", guid)
    assert sent_back >= 1, "the refused item went back to upload the media again"


def action_job(guid: str, message: dict[str, object], customers: list[str]) -> dict[str, object]:
    return {"request_id": f"act-{uuid.uuid4().hex[:10]}", "kind": "campaign", "created_by": "test",
            "message": message, "targets": {"mode": "snapshot", "items": [{"guid": guid, "to_id": c}
                                                                           for c in customers]}}


def test_tags_add_and_remove_are_idempotent(stack: Stack) -> None:
    guid, customer = f"tg-{uuid.uuid4().hex[:6]}", f"cust-{uuid.uuid4().hex[:6]}"
    start = gateway(stack, f"/_admin/customers/{customer}", "PUT", {"tags": ["vip"], "version": 1})
    assert start["version"] == 1
    add = action_job(guid, {"type": "tags.add", "tagIds": ["t1", "t2"]}, [customer])
    publish(stack, json.dumps(add).encode(), json.dumps(add).encode())  # published twice: one job
    assert wait_for(lambda: completed(stack, str(add["request_id"])), 60, "tags.add") == {"confirmed": 1}
    again = action_job(guid, {"type": "tags.add", "tagIds": ["t2", "t1"]}, [customer])  # the same tags again
    publish(stack, json.dumps(again).encode())
    assert wait_for(lambda: completed(stack, str(again["request_id"])), 60, "tags.add again") == {"confirmed": 1}
    remove = action_job(guid, {"type": "tags.remove", "tagIds": ["t1", "nope"]}, [customer])
    publish(stack, json.dumps(remove).encode())
    assert wait_for(lambda: completed(stack, str(remove["request_id"])), 60, "tags.remove") == {"confirmed": 1}
    sync = action_job(guid, {"type": "customer.sync"}, [customer])
    publish(stack, json.dumps(sync).encode())
    assert wait_for(lambda: completed(stack, str(sync["request_id"])), 60, "sync") == {"confirmed": 1}
    # The second add changed nothing (no new version); the twice-published request made one call.
    assert db(stack, "SELECT tags, version FROM customers WHERE customer_id = %s", customer) == [(["t2", "vip"], 3)]
    calls = [s["content"] for s in sends_for(stack, guid)]
    assert calls == ["tags.add:t1,t2", "tags.add:t1,t2", "tags.remove:nope,t1", "customer.detail"]
    assert len({s["idempotencyKey"] for s in sends_for(stack, guid)}) == 4


def test_three_concurrent_syncs_of_one_customer_take_effect_once_newest_winning(stack: Stack) -> None:
    customer = f"cust-{uuid.uuid4().hex[:6]}"
    gateway(stack, f"/_admin/customers/{customer}", "PUT", {"name": "Ann", "tags": ["a"], "version": 7})
    # Real time, manual and full reconciliation: three jobs, three guids, one customer, at once.
    jobs = [action_job(f"sy{k}-{uuid.uuid4().hex[:6]}", {"type": "customer.sync"}, [customer]) for k in range(3)]
    publish(stack, *(json.dumps(j).encode() for j in jobs))
    for j in jobs:
        assert wait_for(lambda j=j: completed(stack, str(j["request_id"])), 60, "a sync") == {"confirmed": 1}
    assert db(stack, "SELECT name, version, writes FROM customers WHERE customer_id = %s", customer) == \
        [("Ann", 7, 1)]  # three reads of v7: applied once
    # A newer version at the gateway: the next sync brings it; Pacer never goes back to v7.
    gateway(stack, f"/_admin/customers/{customer}", "PUT", {"name": "Ann B", "version": 9})
    newer = action_job(f"sy3-{uuid.uuid4().hex[:6]}", {"type": "customer.sync"}, [customer])
    publish(stack, json.dumps(newer).encode())
    assert wait_for(lambda: completed(stack, str(newer["request_id"])), 60, "the newer sync") == {"confirmed": 1}
    assert db(stack, "SELECT name, version, writes FROM customers WHERE customer_id = %s", customer) == \
        [("Ann B", 9, 2)]


def test_an_upload_refused_because_the_account_is_out_holds_the_guid_until_it_is_back(stack: Stack) -> None:
    guid = f"mk-{uuid.uuid4().hex[:6]}"
    gateway(stack, "/_admin/actions", "PUT", {"media_ready_after_ms": 0})
    gateway(stack, f"/_admin/devices/{guid}", "PUT", {"status": "unauthorized"})
    job = media_job(guid, 2, f"https://cdn.example/{guid}/a.png")
    publish(stack, json.dumps(job).encode())
    state = wait_for(lambda: next(iter(db(stack, "SELECT state::text, source FROM guid_states WHERE guid = %s",
                                          guid)), None), 60, "the guid's state")
    assert state == ("unauthorized", "send_failure")
    assert db(stack, "SELECT count(*) FROM media WHERE guid = %s", guid) == [(0,)]  # nothing uploaded yet
    gateway(stack, f"/_admin/devices/{guid}", "PUT", {"status": "online"})
    body = {"cmd": "device.status", "guid": guid, "ts": datetime.now(UTC).isoformat(), "data": {"status": "online"}}
    produce_all(make_producer({"bootstrap.servers": stack.infra.kafka_bootstrap}),
                [(f"{stack.topic_prefix}.callbacks", guid.encode(), json.dumps(body).encode(), None)])
    assert wait_for(lambda: completed(stack, str(job["request_id"])), 90, "the job") == {"confirmed": 2}
    assert len(sends_for(stack, guid)) == 2


def test_an_item_waiting_for_its_media_still_expires(stack: Stack) -> None:
    guid = f"me-{uuid.uuid4().hex[:6]}"
    gateway(stack, "/_admin/actions", "PUT", {"media_ready_after_ms": 3_600_000})  # never ready in time
    job = media_job(guid, 2, f"https://cdn.example/{guid}/late.png")
    job["expire_at"] = (datetime.now(UTC) + timedelta(seconds=8)).isoformat()
    publish(stack, json.dumps(job).encode())
    assert wait_for(lambda: completed(stack, str(job["request_id"])), 60, "the job") == {"expired": 2}
    assert sends_for(stack, guid) == []
    assert db(stack, "SELECT status FROM media WHERE guid = %s", guid) == [("pending",)]
