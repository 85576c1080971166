"""Approval of requery jobs by size (``PACER_PLANNER_APPROVAL_ABOVE_ITEMS``), on real Postgres,
Kafka and the fake gateway's audience endpoint: the page that takes a job's paged items past
the size holds the job for an admin in the page's own transaction; what was dispatched waits
instead of sending; approval releases it and paging goes on without asking again; rejection
cancels what is left.

Sends go through the senders' own ``pacer_begin_send`` (``PostgresItemRepository``), on the
commands the planner put on Kafka; held items come back through ``pacer_release_held``, the
reconciler's release sweep."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest

from pacer_common.db.pool import open_pool
from pacer_common.domain.commands import ItemCommand
from pacer_common.kafka import make_producer
from pacer_planner.adapters.http import HttpTargetSource
from pacer_planner.adapters.kafka import KafkaCommandBus
from pacer_planner.adapters.postgres import ApprovalPolicy, PostgresJobStore
from pacer_planner.adapters.postgres_targets import PostgresTargetStore
from pacer_planner.core import PagingConfig, PagingSupervisor, Planner, TargetPager
from pacer_planner.ports import CommandBus
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from tests.integration import audiences
from tests.integration.audiences import Audience, requery, targets
from tests.integration.control_support import control_api
from tests.integration.helpers import one, read_topic, wait_for
from tests.integration.helpers import tuples as rows

pytestmark = pytest.mark.timeout(120)
gateway, topics, audience = audiences.gateway, audiences.topics, audiences.audience  # shared fixtures


@dataclass
class Instance:
    planner: Planner
    pager: TargetPager
    store: PostgresTargetStore
    supervisor: PagingSupervisor


class SenderAtOnce:
    """The real bus, and a sender that begins every command the moment it is flushed: what a
    page's items would do if its job were held only after its commands went out."""

    inner: CommandBus  # the planner's own, given by ``over``

    def __init__(self, url: str) -> None:
        self.url = url
        self.outcomes: list[str] = []

    def over(self, inner: CommandBus) -> CommandBus:
        self.inner = inner
        return self

    def dispatch(self, commands: Sequence[ItemCommand]) -> int:
        n = self.inner.dispatch(commands)
        self.outcomes += asyncio.run(begin(self.url, list(commands)))  # the pager flushes off its loop
        return n

    def dead_letter(self, key: bytes | None, value: bytes, reason: str, tenant: str | None = None) -> None:
        self.inner.dead_letter(key, value, reason, tenant)


@asynccontextmanager
async def planner(url: str, kafka_config: dict[str, str], topics: dict[str, str], above: int,
                  sender_at_once: SenderAtOnce | None = None) -> AsyncIterator[Instance]:
    """One planner whose approval size is ``above``, wired as ``main.py`` wires it (its
    commands also begun at once by ``sender_at_once``, when given)."""
    pool = await open_pool(url, min_size=1, max_size=4)
    http = httpx.AsyncClient(timeout=5.0)
    bus: CommandBus = KafkaCommandBus(make_producer(kafka_config), lambda lane: topics[lane], topics["dlq"])
    if sender_at_once is not None:
        bus = sender_at_once.over(bus)
    store = PostgresTargetStore(pool, above)
    pager = TargetPager(store, HttpTargetSource(http), bus, PagingConfig(owner="p1", backoff_initial_s=0.01))
    try:
        yield Instance(Planner(PostgresJobStore(pool, ApprovalPolicy(above)), bus), pager, store,
                       PagingSupervisor(pager, store, max_jobs=4, sweep_s=0.1))
    finally:
        await http.aclose()
        await pool.close()


def commands(kafka_config: dict[str, str], topics: dict[str, str], expect: int) -> list[ItemCommand]:
    """Every command the planner has put on the batch lane so far (``expect`` of them)."""
    got = [ItemCommand.model_validate(c["value"]) for c in read_topic(kafka_config, topics["batch"], expect=expect)]
    assert len(got) == expect
    return got


async def begin(url: str, cmds: list[ItemCommand]) -> list[str]:
    """Each command's outcome at a sender's ``pacer_begin_send``, under the guids' leases."""
    pool = await open_pool(url, min_size=1, max_size=4)
    try:
        await PostgresGuidLeases(pool, timedelta(seconds=60)).acquire(sorted({c.guid for c in cmds}), "w1")
        repo = PostgresItemRepository(pool, timedelta(seconds=60))
        return [b.outcome for b in await asyncio.gather(*(repo.begin_send(c, "w1") for c in cmds))]
    finally:
        await pool.close()




def job_state(url: str, job: str) -> tuple[Any, ...]:
    return one(url, "SELECT status, paused_reason, paused_by, total, target_pages FROM jobs WHERE job_id = %s", job)


def audit(url: str, job: str) -> list[tuple[Any, ...]]:
    return rows(url, "SELECT actor, action, reason FROM audit_log WHERE target_id = %s ORDER BY id", job)


def sent(url: str, job: str) -> int:
    """Items of the job a sender has begun (reserved their key and written ``submitted``)."""
    return one(url, "SELECT count(*) FROM items WHERE job_id = %s AND status <> 'pending' AND status <> 'abandoned'",
               job)


def test_a_requery_job_whose_pages_pass_the_size_waits_for_approval_then_pages_on_and_sends_the_rest(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    url = database_url
    audience.put(targets(10, guids=2))  # pages of 4: 4 (under the size of 6), 8 (past it), 10

    async def go() -> str:
        async with planner(url, kafka_config, topics, above=6) as p:
            h = await p.planner.handle(None, requery("rq-big", audience.url, 4))
            assert h.job_id is not None
            job = h.job_id
            assert job_state(url, job)[0] == "running"  # nothing paged yet: nothing to judge
            assert await p.pager.run(job, max_pages=1) == "stopped"
            assert await begin(url, commands(kafka_config, topics, 4)) == ["submitted"] * 4  # page 1 goes out

            # Page 2 takes the job to 8 items: it is stored, the job waits, paging stops.
            assert await p.pager.run(job) == "not_running"
            reason = "awaiting approval: 8 items paged, above 6"
            assert job_state(url, job) == ("awaiting_approval", reason, "system:planner", 8, 2)
            assert audit(url, job) == [("system:planner", "await_approval", reason)]
            assert len(audience.requests()) == 2
            # Its commands went out; a sender holds its items instead of sending them.
            dispatched = commands(kafka_config, topics, 8)
            assert Counter(await begin(url, dispatched)) == {"not_pending": 4, "held": 4}
            assert sent(url, job) == 4
            assert one(url, "SELECT count(*) FROM items WHERE job_id = %s AND held", job) == 4
            # No planner pages it meanwhile.
            assert job not in await p.store.candidates("p1", 10)
            assert await p.pager.run(job) == "not_running" and len(audience.requests()) == 2

            async with control_api(url) as api:
                page = (await api.get("/approvals", "operator")).json()
                (view,) = page["jobs"]
                assert (view["job_id"], view["target_mode"], view["paused_reason"]) == (job, "requery", reason)
                # What its pages brought so far and is still to send: page 2's, held; page 1's went out.
                assert view["projection"]["items"] == 4
                held = {r[0] for r in rows(url, "SELECT to_id FROM items WHERE job_id = %s AND held", job)}
                assert {(s["to_id"], s["content"]) for s in view["samples"]} <= {
                    (f"r{i}", f"hi {i}") for i in range(8)} and {s["to_id"] for s in view["samples"]} == held
                html = (await api.client.get("http://control/console/part/approvals", headers=api.auth("admin"))).text
                assert re.search(r'class="muted requery">Targets paged from an audience', html)
                r = await api.post(f"/jobs/{job}/approve", "admin", json={"reason": "expected size"})
                assert (r.status_code, r.json()["status"]) == (200, "running"), r.text
                assert "goes on paging" in r.json()["message"]

            # Approved: the release sweep frees the held items, the paging sweep goes on.
            assert one(url, "SELECT pacer_release_held(1000)") == 4
            stop_sweeping = asyncio.Event()
            sweeper = asyncio.create_task(p.supervisor.run(stop_sweeping))
            await asyncio.to_thread(wait_for, lambda: one(
                url, "SELECT dispatched_at IS NOT NULL FROM jobs WHERE job_id = %s", job), 30, "paging to finish")
            stop_sweeping.set()
            await sweeper
            everything = commands(kafka_config, topics, 10)
            assert Counter(await begin(url, everything)) == {"not_pending": 4, "submitted": 6}
            return job

    job = asyncio.run(go())
    # Past the size again on page 3 (10 items), and not asked again: approved once.
    assert one(url, "SELECT status, total, target_pages, target_complete_at IS NOT NULL, approved_by FROM jobs"
                    " WHERE job_id = %s", job) == ("running", 10, 3, True, "token:admin")
    assert [a for _, a, _ in audit(url, job)] == ["await_approval", "approve"]
    assert len(audience.requests()) == 3
    # Every item sent once, under its own key.
    assert rows(url, "SELECT status, attempts, count(*) FROM items WHERE job_id = %s GROUP BY 1, 2", job) == [
        ("submitted", 1, 10)]
    assert one(url, "SELECT count(*) FROM send_ledger l JOIN items i USING (item_id) WHERE i.job_id = %s", job) == 10


def test_a_rejected_requery_job_is_cancelled_having_sent_nothing_when_its_first_page_passed_the_size(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    url = database_url
    audience.put(targets(10, guids=2))  # pages of 8: the first is past the size of 6
    sender = SenderAtOnce(url)

    async def go() -> str:
        async with planner(url, kafka_config, topics, above=6, sender_at_once=sender) as p:
            h = await p.planner.handle(None, requery("rq-reject", audience.url, 8))
            assert h.job_id is not None
            job = h.job_id
            assert await p.pager.run(job) == "not_running"
            assert job_state(url, job) == (
                "awaiting_approval", "awaiting approval: 8 items paged, above 6", "system:planner", 8, 1)
            # A sender that had the page's commands at once held each: the job waited first.
            assert sender.outcomes == ["held"] * 8
            assert await begin(url, commands(kafka_config, topics, 8)) == ["held"] * 8
            assert one(url, "SELECT * FROM pacer_decide_approval(%s, false, 'token:a', 'wrong audience')", job) == (
                "done", "job rejected: awaiting_approval → cancelled; nothing more of it is sent", "cancelled")
            assert job not in await p.store.candidates("p1", 10)
            assert await p.pager.run(job) == "not_running"
            assert one(url, "SELECT pacer_release_held(1000)") == 0
            assert await begin(url, commands(kafka_config, topics, 8)) == ["not_pending"] * 8
            return job

    job = asyncio.run(go())
    assert job_state(url, job)[0] == "cancelled"
    assert rows(url, "SELECT status, count(*) FROM items WHERE job_id = %s GROUP BY 1", job) == [("abandoned", 8)]
    assert one(url, "SELECT count(*) FROM send_ledger l JOIN items i USING (item_id) WHERE i.job_id = %s", job) == 0
    assert len(audience.requests()) == 1
    assert [a for _, a, _ in audit(url, job)] == ["await_approval", "reject", "cancel"]


def test_a_requery_job_whose_pages_stay_within_the_size_never_waits(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    url = database_url
    audience.put(targets(10, guids=2))  # pages of 4: 4, 8, 10 items, none past the size of 10

    async def go() -> str:
        async with planner(url, kafka_config, topics, above=10) as p:
            h = await p.planner.handle(None, requery("rq-small", audience.url, 4))
            assert h.job_id is not None
            assert await p.pager.run(h.job_id) == "complete"
            assert await begin(url, commands(kafka_config, topics, 10)) == ["submitted"] * 10
            return h.job_id

    job = asyncio.run(go())
    assert job_state(url, job) == ("running", None, None, 10, 3)
    assert audit(url, job) == []


def test_an_approved_requery_job_is_not_asked_again_however_many_items_its_pages_bring(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    url = database_url
    audience.put(targets(12, guids=2))  # pages of 4: each past the size of 3

    async def go() -> str:
        async with planner(url, kafka_config, topics, above=3) as p:
            h = await p.planner.handle(None, requery("rq-once", audience.url, 4))
            assert h.job_id is not None
            job = h.job_id
            assert await p.pager.run(job) == "not_running"
            assert job_state(url, job) == (
                "awaiting_approval", "awaiting approval: 4 items paged, above 3", "system:planner", 4, 1)
            assert one(url, "SELECT outcome FROM pacer_decide_approval(%s, true, 'token:a', NULL)", job) == "done"
            assert await p.pager.run(job) == "complete"
            assert await begin(url, commands(kafka_config, topics, 12)) == ["submitted"] * 12
            return job

    job = asyncio.run(go())
    assert job_state(url, job) == ("running", None, None, 12, 3)
    assert one(url, "SELECT approved_by FROM jobs WHERE job_id = %s", job) == "token:a"
    assert [(actor, a) for actor, a, _ in audit(url, job)] == [("system:planner", "await_approval"),
                                                                ("token:a", "approve")]
    assert len(audience.requests()) == 3
