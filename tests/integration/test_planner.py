"""The planner use case on real Postgres and Kafka: store, dispatch, dedupe, refuse."""

from __future__ import annotations

import asyncio
import json
import zlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pacer_common.db.errors import RefusedError
from pacer_common.db.pool import open_pool
from pacer_common.domain.validation import validate_request
from pacer_common.kafka import ensure_topics, make_producer
from pacer_planner.adapters.kafka import KafkaCommandBus
from pacer_planner.adapters.postgres import ApprovalPolicy, PostgresJobStore, claim_guids
from pacer_planner.core import Handled, Planner, intake
from pacer_planner.domain.planning import plan
from pacer_planner.ports import Known
from pacer_sender.adapters.queue import PostgresGuidQueue
from tests.integration.helpers import eventually, read_topic, waiting_for_locks


def request(rid: str, n: int, guids: int = 2, kind: str = "campaign", **extra: object) -> bytes:
    return json.dumps({
        "request_id": rid, "kind": kind, "created_by": "t", "message": {"type": "text", "content": "hi {n}"},
        "targets": {"mode": "snapshot", "items": [
            {"guid": f"g{i % guids}", "to_id": f"r{i}", "vars": {"n": str(i)}} for i in range(n)]},
        "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(), **extra,
    }).encode()


@pytest.fixture
def topics(kafka_config: dict[str, str], topic_prefix: str) -> dict[str, str]:
    t = {lane: f"{topic_prefix}.item-commands.{lane}" for lane in ("online", "batch")} | {
        "dlq": f"{topic_prefix}.job-requests.dlq"}
    ensure_topics(kafka_config, {name: (1, {}) for name in t.values()})
    return t


def run(url: str, kafka_config: dict[str, str], topics: dict[str, str], bodies: list[bytes],
        limit: int = 100_000, max_shard_items: int = 50_000, approval: ApprovalPolicy | None = None) -> list[Handled]:
    async def go() -> list[Handled]:
        pool = await open_pool(url, min_size=1, max_size=2)
        bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: topics[lane], topics["dlq"])
        planner = Planner(PostgresJobStore(pool, approval), bus, max_backlog_per_guid=limit,
                          max_shard_items=max_shard_items)
        try:
            return [await planner.handle(None, b) for b in bodies]
        finally:
            await pool.close()

    return asyncio.run(go())


def test_a_request_becomes_a_job_with_shards_items_and_commands(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    (h,) = run(database_url, kafka_config, topics, [request("r1", 10)])
    assert (h.outcome, h.items) == ("planned", 10)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM shards").fetchone() == (2,)
        assert conn.execute("SELECT count(*) FROM items WHERE status = 'pending'").fetchone() == (10,)
        assert conn.execute("SELECT dispatched_at IS NOT NULL FROM jobs").fetchone() == (True,)
    commands = read_topic(kafka_config, topics["batch"], expect=10)
    assert sorted(c["value"]["to_id"] for c in commands) == sorted(f"r{i}" for i in range(10))
    assert {c["key"] for c in commands} == {b"g0", b"g1"}


def test_online_kinds_go_to_the_online_lane(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    run(database_url, kafka_config, topics, [request("r2", 1, 1, kind="auto_reply", source_msg_uid="m1")])
    assert len(read_topic(kafka_config, topics["online"], expect=1)) == 1


def test_the_same_request_twice_is_one_job(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    outcomes = [h.outcome for h in run(database_url, kafka_config, topics, [request("r3", 5)] * 2)]
    assert outcomes == ["planned", "duplicate"]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM items").fetchone() == (5,)


def test_a_stored_but_undispatched_job_is_dispatched_on_redelivery_a_page_at_a_time(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    run(database_url, kafka_config, topics, [request("r4", 10)])
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET dispatched_at = NULL")  # as if the planner died before the flush
        conn.execute("UPDATE items SET status = 'confirmed' WHERE to_id = 'r0'")  # sent meanwhile
        pending = {str(i) for (i,) in conn.execute("SELECT item_id FROM items WHERE status = 'pending'")}
    pages: list[int] = []
    monkeypatch.setattr(intake, "REDISPATCH_PAGE", 3)
    dispatch = KafkaCommandBus.dispatch

    def counted(bus: KafkaCommandBus, page: Any) -> int:
        pages.append(len(page))
        return dispatch(bus, page)

    monkeypatch.setattr(KafkaCommandBus, "dispatch", counted)
    (h,) = run(database_url, kafka_config, topics, [request("r4", 10)])
    assert (h.outcome, h.items, pages) == ("redispatched", 9, [3, 3, 3])
    # each pending item's command once more, the confirmed one's not
    sent = Counter(c["value"]["item_id"] for c in read_topic(kafka_config, topics["batch"], expect=19))
    assert sorted(sent.values()) == [1] + [2] * 9 and {i for i, n in sent.items() if n == 2} == pending


def test_admission_refuses_batch_work_over_a_guids_backlog_but_not_replies(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    results = run(database_url, kafka_config, topics, [
        request("r5", 8, 1), request("r6", 5, 1), request("r7", 1, 1, kind="auto_reply", source_msg_uid="m"),
        request("r5", 8, 1)], limit=10)
    assert [h.outcome for h in results] == ["planned", "dead_lettered", "planned", "duplicate"]
    assert "admission refused: guid 'g0' has 8 queued items and this request adds 5" in (results[1].reason or "")
    dlq = read_topic(kafka_config, topics["dlq"], expect=1)
    assert json.loads(dlq[0]["raw"])["request_id"] == "r6"


def test_a_requery_jobs_request_id_published_again_as_a_snapshot_leaves_it_a_requery_job(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    # The job stored under the id is what came again, not what the new bytes say: still paged
    # in, never marked dispatched as if a snapshot's items had gone out (which would end its paging).
    paged = json.loads(request("q-mode", 0))
    paged["targets"] = {"mode": "requery", "url": "http://audience.invalid/people", "page_size": 10}
    first, again = run(database_url, kafka_config, topics, [json.dumps(paged).encode(), request("q-mode", 3)])
    assert (first.outcome, first.paging) == ("paging", True)
    assert (again.outcome, again.job_id, again.items, again.paging) == ("duplicate", first.job_id, 0, True)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT target_mode, dispatched_at FROM jobs").fetchall() == [("requery", None)]
        assert conn.execute("SELECT count(*) FROM items").fetchone() == (0,)


def test_a_long_guid_is_split_into_sub_shards_by_a_stable_hash_of_to_id(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    # g0 and g1 have 10 items each, over a max of 4 per shard: ceil(10 / 4) = 3 sub-shards each.
    (h,) = run(database_url, kafka_config, topics, [request("r8", 20, 2)], max_shard_items=4)
    assert h.outcome == "planned"
    with psycopg.connect(database_url) as conn:
        shards = conn.execute("SELECT guid, sub, subs, total, shard_id FROM shards ORDER BY guid, sub").fetchall()
        items = conn.execute("SELECT item_id::text, guid, to_id, shard_id FROM items").fetchall()
        pending: dict[str, int] = dict(conn.execute("SELECT shard_id, n FROM shard_status_counts WHERE status = 'pending'").fetchall())
    assert {(g, s, n) for g, s, n, _, _ in shards} == {("g0", s, 3) for s in range(3)} | {("g1", s, 3) for s in range(3)}
    assert sum(t for _, _, _, t, _ in shards) == len(items) == 20
    sub_of_shard = {sid: (g, s) for g, s, _, _, sid in shards}
    for _, guid, to_id, sid in items:
        assert sub_of_shard[sid] == (guid, zlib.crc32(to_id.encode()) % 3)
    assert pending == {sid: t for _, _, _, t, sid in shards}
    assert {sid: t for _, _, _, t, sid in shards} == {
        sid: sum(1 for i in items if i[3] == sid) for _, _, _, _, sid in shards}
    commands = read_topic(kafka_config, topics["batch"], expect=20)
    assert sorted((c["value"]["item_id"], c["value"]["shard_id"]) for c in commands) == sorted(
        (i[0], i[3]) for i in items)


def test_a_job_is_stored_with_a_synchronous_commit_when_the_database_default_is_off(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    """The request's offset is committed once the job is stored: that commit must be durable
    even where an operator set ``synchronous_commit = off`` for the database."""
    dbname = database_url.rsplit("/", 1)[1]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" SET synchronous_commit = off')
        conn.execute("""
            CREATE TABLE sync_probe (setting text NOT NULL);
            CREATE FUNCTION probe_job() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO sync_probe VALUES (current_setting('synchronous_commit')); RETURN NULL; END $$;
            CREATE TRIGGER probe AFTER INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION probe_job();""")
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute("SELECT current_setting('synchronous_commit')").fetchone() == ("off",)
    (h,) = run(database_url, kafka_config, topics, [request("r-sync", 3)])
    assert h.outcome == "planned"
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT setting FROM sync_probe").fetchall() == [("on",)]


def job_status(url: str, rid: str) -> tuple[str, str | None]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT status, paused_reason FROM jobs WHERE request_id = %s", (rid,)).fetchone()  # type: ignore[return-value]  # one row per request id: None would fail the caller's assertion


def test_a_job_above_the_approval_size_waits_for_approval_and_a_smaller_one_runs(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    run(database_url, kafka_config, topics, [request("big", 4), request("small", 3)], approval=ApprovalPolicy(3))
    assert job_status(database_url, "big") == ("awaiting_approval", "awaiting approval: 4 items, above 3")
    assert job_status(database_url, "small") == ("running", None)


def test_new_content_waits_for_approval_until_an_admin_approved_that_message(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    policy = ApprovalPolicy(new_content=True)
    run(database_url, kafka_config, topics, [request("first", 2)], approval=policy)
    assert job_status(database_url, "first") == (
        "awaiting_approval", "awaiting approval: new content (first send of this message)")
    with psycopg.connect(database_url) as conn:
        (job,) = conn.execute("SELECT job_id FROM jobs WHERE request_id = 'first'").fetchone()
        assert conn.execute("SELECT outcome FROM pacer_decide_approval(%s, true, 'token:a', 'ok')",
                            (job,)).fetchone() == ("done",)
    run(database_url, kafka_config, topics, [request("second", 2)], approval=policy)
    assert job_status(database_url, "first") == ("running", None)
    assert job_status(database_url, "second") == ("running", None)  # the same message, approved before
    other = json.loads(request("third", 2))
    other["message"]["content"] = "a different text {n}"
    run(database_url, kafka_config, topics, [json.dumps(other).encode()], approval=policy)
    assert job_status(database_url, "third")[0] == "awaiting_approval"


# ---- tenants: jobs record theirs, their guids become its, refusals are dead-lettered -------------

def tenant_request(rid: str, guids: list[str], tenant: str | None = None) -> bytes:
    extra = {} if tenant is None else {"tenant": tenant}
    body = json.loads(request(rid, 0, 1, **extra))
    body["targets"]["items"] = [{"guid": g, "to_id": f"to-{g}", "vars": {"n": "1"}} for g in guids]
    return json.dumps(body).encode()


def test_jobs_record_their_tenant_and_claim_its_guids(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, base_url) VALUES ('acme', 'http://acme')")
    hs = run(database_url, kafka_config, topics, [tenant_request("t1", ["a1", "a2"], "acme"), tenant_request("t2", ["d1"])])
    assert [h.outcome for h in hs] == ["planned", "planned"]
    with psycopg.connect(database_url) as conn:
        assert dict(conn.execute("SELECT request_id, tenant FROM jobs").fetchall()) == {"t1": "acme", "t2": "default"}
        assert dict(conn.execute("SELECT guid, tenant FROM tenant_guids").fetchall()) == {
            "a1": "acme", "a2": "acme", "d1": "default"}
    commands = read_topic(kafka_config, topics["batch"], expect=3)
    assert {c["value"]["guid"]: c["value"]["tenant"] for c in commands} == {"a1": "acme", "a2": "acme", "d1": "default"}


def test_refused_tenants_are_dead_lettered_with_the_reason_and_store_nothing(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, base_url, max_guids) VALUES ('small', 'http://s', 2)")
    hs = run(database_url, kafka_config, topics, [
        tenant_request("u1", ["g1"], "nope"),  # unknown tenant
        tenant_request("u2", ["s1", "s2"], "small"),
        tenant_request("u3", ["s1"]),  # s1 is small's, not default's
        tenant_request("u4", ["s3"], "small"),  # a third guid: over small's max_guids
    ])
    assert [h.outcome for h in hs] == ["dead_lettered", "planned", "dead_lettered", "dead_lettered"]
    assert "unknown tenant 'nope'" in (hs[0].reason or "")
    assert "guid 's1' belongs to another tenant than 'default'" in (hs[2].reason or "")
    assert "over its quota of 2 (max_guids)" in (hs[3].reason or "")
    dlq = read_topic(kafka_config, topics["dlq"], expect=3)
    assert sorted(json.loads(d["raw"])["request_id"] for d in dlq) == ["u1", "u3", "u4"]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT array_agg(request_id) FROM jobs").fetchone() == (["u2"],)
        assert conn.execute("SELECT count(*) FROM tenant_guids").fetchone() == (2,)


def test_a_stored_jobs_request_delivered_again_after_its_quota_was_lowered_is_not_dead_lettered(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    # Its job holds three guids; the quota is then lowered to two. Delivered again (a crash
    # before its offset moved, a rewind, its publisher sending it again), the request is that
    # job: no dead-letter record saying "refused" while its items go out.
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, max_guids) VALUES ('acme', 3)")
    body = tenant_request("q1", ["a1", "a2", "a3"], "acme")
    assert [h.outcome for h in run(database_url, kafka_config, topics, [body])] == ["planned"]
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE tenants SET max_guids = 2 WHERE name = 'acme'")
    again, new = run(database_url, kafka_config, topics, [body, tenant_request("q2", ["a4"], "acme")])
    assert (again.outcome, again.reason) == ("duplicate", None)
    assert new.outcome == "dead_lettered" and "over its quota of 2 (max_guids)" in (new.reason or "")
    (dlq,) = read_topic(kafka_config, topics["dlq"], expect=1)
    assert json.loads(dlq["raw"])["request_id"] == "q2"


def test_a_request_id_another_tenant_already_used_is_dead_lettered_and_stores_nothing(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    # One id, one job: globex's request under acme's id is refused in words that do not name
    # acme, claims none of its guids, and acme's request delivered again is still its job.
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme'), ('globex')")
    theirs, mine = tenant_request("shared-id", ["a1"], "acme"), tenant_request("shared-id", ["g1", "g2"], "globex")
    hs = run(database_url, kafka_config, topics, [theirs, mine, theirs])
    assert [h.outcome for h in hs] == ["planned", "dead_lettered", "duplicate"]
    assert hs[1].reason == "request_id 'shared-id' is already used by another tenant"
    (dlq,) = read_topic(kafka_config, topics["dlq"], expect=1)
    assert (dlq["raw"], dlq["headers"]["pacer-tenant"]) == (mine, b"globex")
    assert b"acme" not in dlq["headers"]["pacer-error-reason"]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT request_id, tenant FROM jobs").fetchall() == [("shared-id", "acme")]
        assert dict(conn.execute("SELECT guid, tenant FROM tenant_guids").fetchall()) == {"a1": "acme"}


class StoredMeanwhile(PostgresJobStore):
    """The job store, with ``meanwhile`` stored through it right after the first lookup of a
    request id finds no job: as when the same id arrives on another partition and that
    partition's planner stores its job between this planner's lookup and its store."""

    def __init__(self, pool: Any, meanwhile: bytes) -> None:
        super().__init__(pool)
        self.meanwhile: bytes | None = meanwhile

    async def known(self, request_id: str) -> Known | None:
        found = await super().known(request_id)
        if found is None and self.meanwhile is not None:
            body, self.meanwhile = self.meanwhile, None
            stored = await self.store(plan(validate_request(body, datetime.now(UTC)), datetime.now(UTC)))
            assert stored.created
        return found


def test_a_request_whose_id_another_tenant_took_while_it_was_judged_claims_none_of_its_guids(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    # globex's request finds no job under the id, then acme's job is stored under it before
    # globex's is: globex's insert finds the id taken and the request is refused. Nothing of its
    # transaction stays, so its guids are not globex's and do not count against its max_guids:
    # acme's later job naming them is planned.
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme')")
        conn.execute("INSERT INTO tenants (name, max_guids) VALUES ('globex', 2)")
    theirs, mine = tenant_request("raced-id", ["a1"], "acme"), tenant_request("raced-id", ["x1", "x2"], "globex")

    async def go() -> list[Handled]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: topics[lane], topics["dlq"])
        try:
            refused = await Planner(StoredMeanwhile(pool, theirs), bus).handle(None, mine)
            later = await Planner(PostgresJobStore(pool), bus).handle(None, tenant_request("later", ["x1"], "acme"))
            return [refused, later]
        finally:
            await pool.close()

    refused, later = asyncio.run(go())
    assert (refused.outcome, refused.reason) == ("dead_lettered", "request_id 'raced-id' is already used by another tenant")
    assert (later.outcome, later.reason) == ("planned", None)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT request_id, tenant FROM jobs ORDER BY request_id").fetchall() == [
            ("later", "acme"), ("raced-id", "acme")]
        assert dict(conn.execute("SELECT guid, tenant FROM tenant_guids").fetchall()) == {"a1": "acme", "x1": "acme"}
    (dlq,) = read_topic(kafka_config, topics["dlq"], expect=1)
    assert (dlq["raw"], dlq["headers"]["pacer-tenant"]) == (mine, b"globex")


async def claim_behind_an_open_claim(url: str, first: list[str], second: list[str]) -> str | None:
    """Two jobs of tenant acme claim guids at once: the first one's transaction stays open (as
    while it copies its items) until the second waits on its claim, then commits. Returns why
    the second was refused, or None (its claim is then committed too)."""
    async with (await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as a,
                await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as b):
        async def claim_second() -> str | None:
            try:
                async with b.transaction():
                    await claim_guids(b, "acme", second)
            except RefusedError as exc:
                return str(exc)
            return None

        async with a.transaction():
            await claim_guids(a, "acme", first)
            waiting = asyncio.create_task(claim_second())
            await eventually(lambda: waiting_for_locks(url), 10, "the second claim waiting for the first")
        return await asyncio.wait_for(waiting, 10)


def test_a_guid_a_concurrent_job_of_the_same_tenant_claimed_first_is_not_another_tenants(
        database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme')")
    assert asyncio.run(claim_behind_an_open_claim(database_url, ["n1"], ["n1", "n2"])) is None
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT guid, tenant FROM tenant_guids ORDER BY guid").fetchall() == [
            ("n1", "acme"), ("n2", "acme")]


def test_max_guids_counts_a_guid_a_concurrent_job_of_the_same_tenant_claimed_first(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, max_guids) VALUES ('acme', 2)")
    reason = asyncio.run(claim_behind_an_open_claim(database_url, ["n1"], ["n1", "n2", "n3"]))
    assert reason == "tenant 'acme' would hold 3 guids, over its quota of 2 (max_guids)"
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT guid, tenant FROM tenant_guids").fetchall() == [("n1", "acme")]


def test_max_guids_holds_against_a_concurrent_job_of_the_same_tenant_claiming_other_new_guids(
        database_url: str) -> None:
    # Neither job sees the other's claim in its own count: the second waits for the first's turn.
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, max_guids) VALUES ('acme', 2)")
    reason = asyncio.run(claim_behind_an_open_claim(database_url, ["n1", "n2"], ["n3"]))
    assert reason == "tenant 'acme' would hold 3 guids, over its quota of 2 (max_guids)"
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT guid FROM tenant_guids ORDER BY guid").fetchall() == [("n1",), ("n2",)]


def test_claims_of_a_tenant_without_max_guids_do_not_wait_for_each_other(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme')")

    async def both() -> None:
        def connect() -> Any:
            return psycopg.AsyncConnection.connect(database_url, autocommit=True, row_factory=dict_row)

        async with await connect() as a, await connect() as b, a.transaction():
            await claim_guids(a, "acme", ["n1"])
            async with b.transaction():  # would hang here if the first held a turn
                await asyncio.wait_for(claim_guids(b, "acme", ["n2"]), 10)

    asyncio.run(both())
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT guid FROM tenant_guids ORDER BY guid").fetchall() == [("n1",), ("n2",)]


def test_a_text_every_target_shares_is_stored_once_on_the_job_and_read_back_whole(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    plain = json.dumps({
        "request_id": "shared-text", "kind": "campaign", "created_by": "t",
        "message": {"type": "text", "content": "双十一 {{sale}} starts now"},
        "targets": {"mode": "snapshot", "items": [{"guid": f"g{i % 2}", "to_id": f"r{i}"} for i in range(4)]},
    }).encode()
    (shared, own) = run(database_url, kafka_config, topics, [plain, request("per-target", 2, guids=1)])
    text = "双十一 {sale} starts now"
    with psycopg.connect(database_url) as conn:
        stored = conn.execute("SELECT j.item_content, i.content FROM items i JOIN jobs j USING (job_id)"
                              " WHERE i.job_id = %s", (shared.job_id,)).fetchall()
        rendered = conn.execute("SELECT j.item_content, i.content FROM items i JOIN jobs j USING (job_id)"
                                " WHERE i.job_id = %s ORDER BY i.to_id", (own.job_id,)).fetchall()
    assert stored == [(text, None)] * 4  # the text once, on the job
    assert rendered == [(None, "hi 0"), (None, "hi 1")]  # rendered per target: each item keeps its own
    # Every reader gets the whole text: the commands the planner publishes, the re-publish from
    # the rows (pacer_item_command), the sender's refill.
    commands = read_topic(kafka_config, topics["batch"], expect=6)
    assert sorted(c["value"]["content"] for c in commands) == sorted([text] * 4 + ["hi 0", "hi 1"])

    async def read_back() -> tuple[list[str], list[str]]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            republished = await PostgresJobStore(pool).pending_commands(str(shared.job_id), None, 10)
            refilled = (await PostgresGuidQueue(pool).next_ready("g0", [], 10)).commands
        finally:
            await pool.close()
        return [c.content for c in republished], [c.content for c in refilled]

    republished, refilled = asyncio.run(read_back())
    assert republished == [text] * 4
    assert sorted(refilled) == sorted([text] * 2 + ["hi 0", "hi 1"])
