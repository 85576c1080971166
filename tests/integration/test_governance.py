"""Job governance in the database: holds (pause / resume / cancel / terminate, shard and guid
pauses), budgets, needs-human guid pauses, coalescing and the release of held items.

Every claim goes through pacer_begin_send, exactly as a sender's does; the holds are lifted
by the same pacer_release_held the reconciler sweeps with.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pacer_common.db.pool import open_pool
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.limits import DEFAULTS, parse_quiet_hours
from pacer_common.domain.requests import JobRequest
from pacer_common.domain.status import ItemStatus
from pacer_planner.adapters.postgres import PostgresJobStore
from pacer_planner.domain.planning import plan
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.adapters.queue import PostgresGuidQueue
from pacer_sender.domain.decisions import Decision
from tests.integration.control_support import control_api
from tests.integration.helpers import seed_job

ACTOR = "token:alice"


def rows(url: str, sql: str, *args: Any) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, args).fetchall()


def one(url: str, sql: str, *args: Any) -> Any:
    (row,) = rows(url, sql, *args)
    return row[0] if len(row) == 1 else row


def action(url: str, job: str, what: str, reason: str | None = None) -> tuple[str, str, str]:
    return one(url, "SELECT * FROM pacer_job_action(%s, %s, %s, %s)", job, what, ACTOR, reason)


def item_cmds(url: str, job: str) -> list[ItemCommand]:
    return [ItemCommand(item_id=str(i), job_id=job, shard_id=s, guid=g, to_id=t, content="hi", idem_key=k,
                        priority=3, kind="campaign")
            for i, s, g, t, k in rows(url, "SELECT item_id, shard_id, guid, to_id, idem_key FROM items"
                                           " WHERE job_id = %s ORDER BY item_id", job)]


async def _repo(url: str, guids: list[str], owner: str = "w1") -> tuple[Any, PostgresItemRepository]:
    pool = await open_pool(url, min_size=1, max_size=8)
    await PostgresGuidLeases(pool, timedelta(seconds=30)).acquire(guids, owner)
    return pool, PostgresItemRepository(pool, timedelta(seconds=30))


def begin_all(url: str, cmds: list[ItemCommand], guids: list[str]) -> list[tuple[str, str | None]]:
    async def go() -> list[tuple[str, str | None]]:
        pool, repo = await _repo(url, guids)
        try:
            out = await asyncio.gather(*(repo.begin_send(c, "w1") for c in cmds))
        finally:
            await pool.close()
        return [(b.outcome, b.holder) for b in out]

    return asyncio.run(go())


def release(url: str) -> int:
    return one(url, "SELECT pacer_release_held(1000)")


def audit(url: str, target: str) -> list[tuple]:
    return rows(url, "SELECT actor, action, before->>'status', after->>'status', reason FROM audit_log"
                     " WHERE target_id = %s ORDER BY id", target)


# -- pause / resume ------------------------------------------------------------------------
def test_a_paused_job_claims_nothing_and_resumes_where_it_stopped(database_url: str) -> None:
    url = database_url
    job, _, _items = seed_job(url, {"g1": 3, "g2": 2})
    assert action(url, job, "pause", "wrong template")[0] == "done"
    out = begin_all(url, item_cmds(url, job), ["g1", "g2"])
    assert all(o == "held" and "job paused: wrong template" in (h or "") for o, h in out)
    assert one(url, "SELECT count(*) FROM items WHERE job_id = %s AND status = 'pending' AND held", job) == 5
    assert release(url) == 0  # the hold is still on: nothing is re-published
    assert action(url, job, "pause")[0] == "noop"
    assert action(url, job, "resume")[0] == "done"
    assert release(url) == 5
    assert one(url, "SELECT count(*) FROM item_events WHERE type = 'ItemReleased'") == 5
    assert one(url, "SELECT count(*) FROM items WHERE held") == 0
    assert [o for o, _ in begin_all(url, item_cmds(url, job), ["g1", "g2"])] == ["submitted"] * 5
    assert [(a, b, c) for _, a, b, c, _ in audit(url, job)] == [("pause", "running", "paused"),
                                                                 ("resume", "paused", "running")]
    assert all(actor == ACTOR for actor, *_ in audit(url, job))


def test_a_paused_shard_or_guid_holds_only_its_own_items(database_url: str) -> None:
    url = database_url
    job, shards, _ = seed_job(url, {"g1": 2, "g2": 2, "g3": 2})
    assert one(url, "SELECT outcome FROM pacer_shard_action(%s, 'pause', %s, 'slow account')",
               shards["g1"], ACTOR) == "done"
    assert one(url, "SELECT pacer_hold_guid('g2', 'operator check', %s)", ACTOR) is True
    by_guid: dict[str, set[str]] = {}
    cmds = item_cmds(url, job)
    for c, (o, _) in zip(cmds, begin_all(url, cmds, ["g1", "g2", "g3"]), strict=True):
        by_guid.setdefault(c.guid, set()).add(o)
    assert by_guid == {"g1": {"held"}, "g2": {"held"}, "g3": {"submitted"}}
    assert one(url, "SELECT outcome FROM pacer_resume_guid('g2', %s)", ACTOR) == "done"
    assert release(url) == 2  # g2's; g1's shard is still paused
    assert one(url, "SELECT outcome FROM pacer_shard_action(%s, 'resume', %s)", shards["g1"], ACTOR) == "done"
    assert release(url) == 2
    assert [t for _, t, *_ in audit(url, "g2")] == ["pause", "resume"]



@pytest.mark.parametrize("plans", ["force_custom_plan", "force_generic_plan"])
def test_releases_of_every_scope_pending_at_once_are_all_worked_through(database_url: str, plans: str) -> None:
    """A job's, a shard's and a guid's release requests side by side: each key is read as its
    own scope's type (a job's uuid is never taken for a shard id), whatever plan Postgres picks."""
    url = database_url
    job_a, _, _ = seed_job(url, {"ga": 2})
    job_b, shards_b, _ = seed_job(url, {"gb": 2})
    job_c, _, _ = seed_job(url, {"gc": 2})
    assert action(url, job_a, "pause")[0] == "done"
    assert one(url, "SELECT outcome FROM pacer_shard_action(%s, 'pause', %s)", shards_b["gb"], ACTOR) == "done"
    assert one(url, "SELECT pacer_hold_guid('gc', 'operator check', %s)", ACTOR) is True
    cmds = item_cmds(url, job_a) + item_cmds(url, job_b) + item_cmds(url, job_c)
    assert {o for o, _ in begin_all(url, cmds, ["ga", "gb", "gc"])} == {"held"}
    assert action(url, job_a, "resume")[0] == "done"
    assert one(url, "SELECT outcome FROM pacer_shard_action(%s, 'resume', %s)", shards_b["gb"], ACTOR) == "done"
    assert one(url, "SELECT outcome FROM pacer_resume_guid('gc', %s)", ACTOR) == "done"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"SET plan_cache_mode = {plans}")
        conn.execute("SET enable_seqscan = off")  # the index paths a large items table takes
        released = [conn.execute("SELECT pacer_release_held(2)").fetchone()[0] for _ in range(8)]
    assert sum(released) == 6 and max(released) <= 2
    assert one(url, "SELECT count(*) FROM items WHERE held") == 0

# -- cancel and terminate ----------------------------------------------------------------------
def test_cancel_abandons_what_waits_lets_in_flight_finish_and_is_final(database_url: str) -> None:
    url = database_url
    job, _, _items = seed_job(url, {"g1": 4})
    cmds = item_cmds(url, job)
    assert [o for o, _ in begin_all(url, cmds[:1], ["g1"])] == ["submitted"]  # one in flight
    outcome, _message, status = action(url, job, "cancel", "customer complaint")
    assert (outcome, status) == ("done", "cancelled")
    counts = dict(rows(url, "SELECT status::text, count(*) FROM items WHERE job_id = %s GROUP BY 1", job))
    assert counts == {"submitted": 1, "abandoned": 3}
    assert one(url, "SELECT count(*) FROM item_events WHERE type = 'ItemCancelled'") == 3
    assert [o for o, _ in begin_all(url, cmds[1:], ["g1"])] == ["not_pending"] * 3
    assert action(url, job, "resume")[0] == "conflict"
    assert action(url, job, "cancel")[0] == "noop"
    assert audit(url, job)[-1][1:4] == ("cancel", "running", "cancelled")


def test_a_terminated_job_resumes_only_after_its_sends_are_reconciled(database_url: str) -> None:
    url = database_url
    job, _, _ = seed_job(url, {"g1": 3})
    cmds = item_cmds(url, job)
    (first,) = begin_all(url, cmds[:1], ["g1"])
    assert first[0] == "submitted"
    assert action(url, job, "terminate")[0] == "done"
    assert {o for o, _ in begin_all(url, cmds[1:], ["g1"])} == {"held"}
    outcome, message, _ = action(url, job, "resume")
    assert outcome == "conflict" and "1 of its items are still in flight" in message

    async def settle() -> bool:
        pool, repo = await _repo(url, ["g1"])
        try:
            epoch = one(url, "SELECT lease_epoch FROM items WHERE item_id = %s", cmds[0].item_id)
            return await repo.settle(cmds[0], epoch, Decision(
                __import__("pacer_common.domain.status", fromlist=["ItemStatus"]).ItemStatus.RECOVERY_PENDING,
                "ItemInDoubt", "in_doubt", "timeout"))
        finally:
            await pool.close()

    assert asyncio.run(settle())
    assert action(url, job, "resume")[0] == "conflict"  # in doubt is not reconciled yet
    with psycopg.connect(url) as conn:
        conn.execute("SELECT * FROM pacer_transition(ARRAY[%s]::uuid[], '{recovery_pending}', 'confirmed',"
                     " 'ItemVerifiedDelivered')", (cmds[0].item_id,))
    assert action(url, job, "resume")[0] == "done"
    assert release(url) == 2


@pytest.mark.parametrize("what", ["pause", "cancel"])
def test_a_pause_or_cancel_racing_claims_has_one_clean_boundary(database_url: str, what: str) -> None:
    """Claims and the action run concurrently. Every claim that won is complete (submitted);
    every item the action reached is held or abandoned; after the action returns, no claim
    succeeds; nothing is both. The action starts once a claim has won and returns while
    claims are still being made, so the boundary falls mid-run."""
    url = database_url
    guids = [f"g{i}" for i in range(20)]
    job, _, _ = seed_job(url, {g: 10 for g in guids})
    cmds = item_cmds(url, job)

    async def go() -> tuple[list[str], list[str], list[str], list[str]]:
        pool, repo = await _repo(url, guids)
        done: list[str] = []  # each claim's outcome, as it comes
        won = asyncio.Event()

        async def claim(c: ItemCommand) -> str:
            outcome = (await repo.begin_send(c, "w1")).outcome
            done.append(outcome)
            if outcome == "submitted":
                won.set()
            return outcome

        try:
            async def claims() -> list[str]:
                out: list[str] = []
                for i in range(0, len(cmds), 10):
                    out += await asyncio.gather(*(claim(c) for c in cmds[i:i + 10]))
                return out

            async def act() -> tuple[list[str], list[str]]:
                await asyncio.wait_for(won.wait(), 30)  # a claim has won before the action starts
                before = list(done)
                async with pool.connection() as conn:
                    await conn.execute("SELECT * FROM pacer_job_action(%s, %s, %s)", (job, what, ACTOR))
                return before, list(done)

            first, (before, by_return) = await asyncio.gather(claims(), act())
            after: list[str] = [b.outcome for b in await asyncio.gather(*(repo.begin_send(c, "w1") for c in cmds))]
            return first, after, before, by_return
        finally:
            await pool.close()

    first, after, before, by_return = asyncio.run(go())
    assert "submitted" in before, "the action started after a claim had won"
    assert len(by_return) < len(cmds), f"the action returned before the last claim ({len(by_return)} made)"
    assert "submitted" not in after  # nothing is claimed once the action has committed
    counts = dict(rows(url, "SELECT status::text, count(*) FROM items WHERE job_id = %s GROUP BY 1", job))
    submitted = first.count("submitted")
    assert 0 < submitted < len(cmds), "the boundary falls mid-run: some claims won, the rest were refused"
    assert counts.get("submitted", 0) == submitted
    rest = "pending" if what == "pause" else "abandoned"
    assert counts.get(rest, 0) == len(cmds) - submitted
    assert sum(counts.values()) == len(cmds)
    if what == "pause":
        assert one(url, "SELECT count(*) FROM items WHERE job_id = %s AND held", job) == len(cmds) - submitted


# -- budgets ----------------------------------------------------------------------------------------
def test_a_budget_pauses_the_job_until_an_admin_confirms_more(database_url: str) -> None:
    url = database_url
    job, _, _ = seed_job(url, {"g1": 5})
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE jobs SET budget_max_sends = 3 WHERE job_id = %s", (job,))
    out = [o for o, _ in begin_all(url, item_cmds(url, job), ["g1"])]
    assert sorted(out) == ["held", "held", "submitted", "submitted", "submitted"]
    assert one(url, "SELECT (status, paused_reason, budget_used) FROM jobs WHERE job_id = %s", job) == \
        ("paused", "budget_exhausted", "3")
    assert audit(url, job)[0][:4] == ("system:budget", "pause", "running", "paused")
    outcome, message, _ = action(url, job, "resume")
    assert outcome == "conflict" and "budget exhausted (3 of 3" in message
    assert one(url, "SELECT outcome FROM pacer_confirm_budget(%s, 3, %s)", job, ACTOR) == "conflict"
    outcome, message, status = one(url, "SELECT * FROM pacer_confirm_budget(%s, 5, %s)", job, ACTOR)
    assert (outcome, status) == ("done", "running") and "job resumed" in message
    assert release(url) == 2
    assert sorted(o for o, _ in begin_all(url, item_cmds(url, job), ["g1"])) == \
        ["not_pending"] * 3 + ["submitted"] * 2
    assert one(url, "SELECT budget_used FROM jobs WHERE job_id = %s", job) == 5


# -- needs-human holds the guid in its lifecycle state -------------------------------------------
def test_a_needs_human_answer_holds_the_guid_in_the_state_its_code_means(database_url: str) -> None:
    from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
    from pacer_sender.domain.decisions import after_failure

    url = database_url
    job, _, _ = seed_job(url, {"g1": 3})
    cmds = item_cmds(url, job)
    assert begin_all(url, cmds[:1], ["g1"])[0][0] == "submitted"
    d = after_failure(SendError(FailureClass.NEEDS_HUMAN, 1002, "account kicked"), 1, RetryPolicy(),
                      datetime.now(UTC), __import__("random").Random(0))

    async def settle() -> bool:
        pool, repo = await _repo(url, ["g1"])
        try:
            epoch = one(url, "SELECT lease_epoch FROM items WHERE item_id = %s", cmds[0].item_id)
            return await repo.settle(cmds[0], epoch, d)
        finally:
            await pool.close()

    assert asyncio.run(settle())
    assert one(url, "SELECT status::text FROM items WHERE item_id = %s", cmds[0].item_id) == "waiting_retry"
    state, source, reason = one(url, "SELECT state::text, source, reason FROM guid_states WHERE guid = 'g1'")
    assert (state, source) == ("kicked", "send_failure") and "1002" in reason and "account kicked" in reason
    assert one(url, "SELECT paused_reason FROM guid_leases WHERE guid = 'g1'") is None  # no free-text pause
    begun = begin_all(url, cmds[1:], ["g1"])
    assert {o for o, _ in begun} == {"held"}
    assert one(url, "SELECT outcome FROM pacer_resume_guid('g1', %s)", ACTOR) == "done"
    assert one(url, "SELECT (state::text, source) FROM guid_states WHERE guid = 'g1'") == ("online", "operator")
    assert [r[0] for r in rows(url, "SELECT state::text FROM guid_state_history WHERE guid = 'g1' ORDER BY id")] \
        == ["kicked", "online"]
    assert audit(url, "g1")[0][:2] == (ACTOR, "resume")
    assert release(url) == 2


# -- breakers (the adapter side; the rule is unit-tested) -------------------------------------------
def test_a_breaker_trip_pauses_the_job_and_records_why(database_url: str) -> None:
    url = database_url
    job, _, _ = seed_job(url, {"g1": 1})

    async def go() -> tuple[bool, bool]:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            store = PostgresLog(pool, "reconciler", timedelta(seconds=60))
            first = await store.hold("job", job, "breaker: 20 consecutive failures", "system:breaker")
            again = await store.hold("job", job, "breaker: 20 consecutive failures", "system:breaker")
            return first, again
        finally:
            await pool.close()

    assert asyncio.run(go()) == (True, False)
    assert one(url, "SELECT (status, paused_by) FROM jobs WHERE job_id = %s", job) == ("paused", "system:breaker")
    assert audit(url, job) == [("system:breaker", "pause", "running", "paused", "breaker: 20 consecutive failures")]


# -- coalescing -----------------------------------------------------------------------------------------
def ticket(version: int, business_id: str = "T-1") -> JobRequest:
    return JobRequest.model_validate({
        "request_id": f"ticket-{business_id}-v{version}-{uuid.uuid4().hex[:6]}", "kind": "ticket_notify",
        "created_by": "crm", "message": {"content": f"ticket now at status {version}"},
        "business_id": business_id, "status_version": version,
        "targets": {"items": [{"guid": "g1", "to_id": "room-1"}, {"guid": "g2", "to_id": "room-2"}]},
    })


def test_ticket_notifications_send_only_the_latest_status(database_url: str) -> None:
    url = database_url
    now = datetime.now(UTC)

    async def go() -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            store = PostgresJobStore(pool)
            for v in (1, 2, 3, 0):  # A → B → C, then a late, older one
                await store.store(plan(ticket(v), now, timedelta(seconds=3)))
            await store.store(plan(ticket(1, business_id="T-2"), now, timedelta(seconds=3)))
        finally:
            await pool.close()

    asyncio.run(go())
    by_version = dict(rows(url, "SELECT j.coalesce_key || ':' || j.coalesce_version, array_agg(DISTINCT i.status::text)"
                                " FROM items i JOIN jobs j USING (job_id) GROUP BY 1"))
    assert by_version == {"T-1:0": ["abandoned"], "T-1:1": ["abandoned"], "T-1:2": ["abandoned"],
                          "T-1:3": ["pending"], "T-2:1": ["pending"]}
    assert one(url, "SELECT count(*) FROM item_events WHERE type = 'ItemSuperseded'") == 6
    # held for the window, so a newer status arriving meanwhile can still replace it
    assert one(url, "SELECT bool_and(not_before >= %s) FROM items WHERE status = 'pending'",
               now + timedelta(seconds=3))


def test_a_breaker_trip_pauses_a_guid(database_url: str) -> None:
    url = database_url

    async def go() -> bool:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            return await PostgresLog(pool, "reconciler", timedelta(seconds=60)).hold(
                "guid", "wx-guid-7", "breaker: 9 of the last 10 outcomes failed", "system:breaker")
        finally:
            await pool.close()

    assert asyncio.run(go()) is True
    assert one(url, "SELECT (paused_reason, paused_by) FROM guid_leases WHERE guid = 'wx-guid-7'") == \
        ("breaker: 9 of the last 10 outcomes failed", "system:breaker")


def test_an_item_held_by_a_claim_racing_the_resume_is_still_released(database_url: str) -> None:
    """A claim that read the hold just before it was lifted marks its item held after the
    release pass: the release request stays open long enough for the next pass to find it."""
    url = database_url
    job, _, _ = seed_job(url, {"g1": 3})
    cmds = item_cmds(url, job)
    assert action(url, job, "pause")[0] == "done"
    begin_all(url, cmds[:2], ["g1"])  # two items met the hold
    assert action(url, job, "resume")[0] == "done"
    assert one(url, "SELECT count(*) FROM hold_releases WHERE scope = 'job' AND key = %s", job) == 1
    assert release(url) == 2
    late = cmds[2].item_id
    with psycopg.connect(url) as conn:  # the racing claim commits its mark now
        conn.execute("UPDATE items SET held = true WHERE item_id = %s", (late,))
    assert release(url) == 1
    assert one(url, "SELECT held FROM items WHERE item_id = %s", late) is False


def test_an_item_claimed_after_the_resume_before_its_release_is_queued_again_on_a_retry(database_url: str) -> None:
    """An item that met the pause is marked held; its command, delivered again after the
    resume, may claim it before the release pass does. The mark must not outlive the claim:
    when the send is to be retried and the item is pending again, the guid's refill and the
    sweep for guids with work have to find it (they pass over held items), long after the
    release request that could have cleared the mark has lapsed."""
    url = database_url
    job, _, _ = seed_job(url, {"g1": 1})
    (cmd,) = item_cmds(url, job)
    assert action(url, job, "pause")[0] == "done"
    assert begin_all(url, [cmd], ["g1"])[0][0] == "held"
    assert action(url, job, "resume")[0] == "done"
    assert begin_all(url, [cmd], ["g1"])[0][0] == "submitted"  # before any release pass
    assert one(url, "SELECT held FROM items WHERE item_id = %s", cmd.item_id) is False

    async def retry() -> bool:
        pool, repo = await _repo(url, ["g1"])
        try:
            epoch = one(url, "SELECT lease_epoch FROM items WHERE item_id = %s", cmd.item_id)
            return await repo.settle(cmd, epoch, Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", "retryable",
                                                          "busy", datetime.now(UTC), release_ledger=True))
        finally:
            await pool.close()

    assert asyncio.run(retry())
    assert release(url) == 0  # nothing pending is held: the request finds nothing
    with psycopg.connect(url) as conn:  # the reconciler's retry_due sweep
        conn.execute("SELECT * FROM pacer_transition(ARRAY[%s]::uuid[], '{waiting_retry}', 'pending',"
                     " 'ItemRequeued')", (cmd.item_id,))
    assert one(url, "SELECT status::text, held FROM items WHERE item_id = %s", cmd.item_id) == ("pending", False)

    async def refill() -> list[str]:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            return [c.item_id for c in (await PostgresGuidQueue(pool).next_ready("g1", [], 10)).commands]
        finally:
            await pool.close()

    assert asyncio.run(refill()) == [cmd.item_id]


def test_a_status_change_clears_a_held_mark_left_by_earlier_code(database_url: str) -> None:
    """Rows marked held and then claimed before the mark was cleared on every move out of
    pending: their mark goes with their next move, back to pending included."""
    url = database_url
    job, _, _ = seed_job(url, {"g1": 1})
    (cmd,) = item_cmds(url, job)
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE items SET status = 'waiting_retry', held = true WHERE item_id = %s", (cmd.item_id,))
        conn.execute("SELECT * FROM pacer_transition(ARRAY[%s]::uuid[], '{waiting_retry}', 'pending',"
                     " 'ItemRequeued')", (cmd.item_id,))
    assert one(url, "SELECT status::text, held FROM items WHERE item_id = %s", cmd.item_id) == ("pending", False)


async def governance(url: str) -> dict[str, int]:
    """The leader's numbers of a stall count: governance and guids by state."""
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        store = PostgresLog(pool, "reconciler", timedelta(seconds=60))
        return await store.governance_stats(timedelta(minutes=10)) | await store.guid_stats()
    finally:
        await pool.close()


async def job_page_stalls(url: str, *jobs: str) -> dict[str, bool]:
    """The shards the Control API marks stalled in ``jobs``, by guid."""
    async with control_api(url, token_prefix=uuid.uuid4().hex[:8]) as api:
        out: dict[str, bool] = {}
        for job in jobs:
            r = await api.get(f"/jobs/{job}", "operator")
            assert r.status_code == 200, r.text
            out |= {s["guid"]: s["stalled"] for s in r.json()["shards"]}
        return out


def test_a_shard_waiting_for_its_guids_quiet_hours_window_cap_or_slow_pace_is_not_stalled(database_url: str) -> None:
    """The reconciler's count and the job page's marks read the same limits the same way."""
    url = database_url
    guids = [f"{name}-{uuid.uuid4().hex[:6]}" for name in ("quiet", "capped", "slow", "stuck", "job-paced",
                                                            "tomorrow")]
    quiet, capped, slow, stuck, job_paced, tomorrow = guids
    job, _, _ = seed_job(url, dict.fromkeys(guids[:4], 1))
    paced_job, _, _ = seed_job(url, {job_paced: 1})
    later, _, _ = seed_job(url, {tomorrow: 1})
    local = datetime.now(ZoneInfo("Asia/Shanghai"))
    inside = f"{local - timedelta(hours=1):%H:%M}-{local + timedelta(hours=1):%H:%M}"
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE shards SET status = 'running', last_progress_at = now() - interval '20 minutes'"
                     " WHERE job_id IN (%s, %s, %s)", (job, paced_job, later))
        conn.execute("UPDATE jobs SET not_before = now() + interval '1 day' WHERE job_id = %s", (later,))
    assert asyncio.run(governance(url))["stalled_shards"] == 5, "a job scheduled for tomorrow is not stalled"
    marks = asyncio.run(job_page_stalls(url, job, paced_job, later))
    assert marks == dict.fromkeys(guids[:5], True) | {tomorrow: False}
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 'test')",
                     (f"job:{paced_job}", Jsonb({"min_interval_s": 3600})))  # its job sends once an hour per guid
        for guid, limits in ((quiet, {"quiet_hours": inside}), (capped, {"per_day": 10}),
                             (slow, {"min_interval_s": 3600})):
            conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 'test')",
                         (guid, Jsonb(limits)))
        day = int(datetime.now(UTC).timestamp() // 86400)
        conn.execute("INSERT INTO guid_leases (guid, windows) VALUES (%s, %s) ON CONFLICT (guid) DO UPDATE"
                     " SET windows = EXCLUDED.windows", (capped, Jsonb({"day": [day, 8]})))  # 8: 10 less the reserve
    assert asyncio.run(governance(url))["stalled_shards"] == 1, "only the guid its limits would let send"
    marks = asyncio.run(job_page_stalls(url, job, paced_job, later))
    assert marks == dict.fromkeys(guids, False) | {stuck: True}, "the job page marks the same shard"
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('*', %s, 'test')",
                     (Jsonb({"quiet_hours": inside}),))
    try:
        assert asyncio.run(governance(url))["stalled_shards"] == 0, "every guid's quiet hours hold it too"
        assert not any(asyncio.run(job_page_stalls(url, job)).values())
    finally:
        with psycopg.connect(url) as conn:
            conn.execute("DELETE FROM guid_limits WHERE guid = '*'")
    with psycopg.connect(url) as conn:
        conn.execute("SELECT pacer_hold_guid(%s, 'looked into', 'test')", (stuck,))
    assert asyncio.run(governance(url))["stalled_shards"] == 0, "a paused guid waits on purpose"
    assert not asyncio.run(job_page_stalls(url, job))[stuck]


def test_a_shard_that_never_moved_is_stalled_on_the_job_page_from_its_creation(database_url: str) -> None:
    """No progress at all: the shard's age counts (its guid stuck from the first item)."""
    url = database_url
    guid = f"never-{uuid.uuid4().hex[:6]}"
    job, _, _ = seed_job(url, {guid: 1})
    assert asyncio.run(job_page_stalls(url, job)) == {guid: False}, "a new shard is not stalled"
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE shards SET created_at = now() - interval '20 minutes', last_progress_at = NULL"
                     " WHERE job_id = %s", (job,))
    assert asyncio.run(job_page_stalls(url, job)) == {guid: True}
    assert asyncio.run(governance(url))["stalled_shards"] == 1


def test_quiet_hours_set_only_in_the_settings_of_the_sender_holding_a_guid_hold_it_too(database_url: str) -> None:
    """``PACER_SENDER_QUIET_HOURS`` lives in a sender's environment; the sender publishes its
    defaults (``sender_limits``), and the guids it holds are read by them."""
    url = database_url
    guid = f"held-{uuid.uuid4().hex[:6]}"
    job, _, _ = seed_job(url, {guid: 1})
    local = datetime.now(ZoneInfo("Asia/Shanghai"))
    inside = f"{local - timedelta(hours=1):%H:%M}-{local + timedelta(hours=1):%H:%M}"
    quiet_sender = DEFAULTS.model_copy(update={"quiet_hours": parse_quiet_hours(inside)}).model_dump(mode="json")
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE shards SET status = 'running', last_progress_at = now() - interval '20 minutes'"
                     " WHERE job_id = %s", (job,))
        conn.execute("INSERT INTO guid_leases (guid, owner, lease_until) VALUES (%s, 's1', now() + interval '1 minute')"
                     " ON CONFLICT (guid) DO UPDATE SET owner = 's1'", (guid,))
        conn.execute("INSERT INTO sender_limits (owner, limits) VALUES ('s1', %s), ('s2', %s)",
                     (Jsonb(DEFAULTS.model_dump(mode="json")), Jsonb(quiet_sender)))
    assert asyncio.run(governance(url))["stalled_shards"] == 1, "another sender's quiet hours do not hold it"
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE guid_leases SET owner = 's2' WHERE guid = %s", (guid,))
    assert asyncio.run(governance(url))["stalled_shards"] == 0, "its holder's quiet hours hold it"


def test_stalled_shards_paused_jobs_and_guids_are_counted_for_alerts(database_url: str) -> None:
    url = database_url
    job, _shards, _ = seed_job(url, {"g1": 2, "g2": 2, "g3": 2})
    other, _, _ = seed_job(url, {"g4": 1})
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE shards SET status = 'running', last_progress_at = now() - interval '20 minutes'"
                     " WHERE job_id = %s", (job,))
        conn.execute("UPDATE shards SET last_progress_at = now() WHERE guid = 'g3'")  # this one moves
    assert one(url, "SELECT pacer_hold_guid('g2', 'operator check', 'token:operator')") is True
    assert one(url, "SELECT pacer_hold_job(%s, 'budget_exhausted', 'system:budget')", other) is True

    assert asyncio.run(governance(url)) == {"jobs_paused_budget": 1, "jobs_paused_breaker": 0, "jobs_paused_operator": 0,
                                    "guids_paused": 1, "guids_slowed": 0, "guids_quiet": 0, "in_doubt_quiet": 0,
                                    "stalled_shards": 1,  # g1 only: g2's guid is paused
                                    "jobs_running": 1, "items:pending": 7,  # job progress: open jobs' items
                                    "guids:online": 0, "guids:offline": 0, "guids:kicked": 0,
                                    "guids:unauthorized": 0,  # with work: only the states that hold it back
                                    "guids_with_work:offline": 0, "guids_with_work:kicked": 0,
                                    "guids_with_work:unauthorized": 0}
    with psycopg.connect(url) as conn:  # a kicked guid is held too: its shard is not stalled, it is counted
        conn.execute("SELECT * FROM pacer_set_guid_state('g1', 'kicked', 'callback', NULL, now())")
        # a switched-off phone with nothing queued is offline, and holds back no work
        conn.execute("SELECT * FROM pacer_set_guid_state('g-idle', 'offline', 'callback', NULL, now())")
        conn.execute("SELECT * FROM pacer_set_guid_state('g4', 'online', 'callback', NULL, now())")  # with work
    kicked = asyncio.run(governance(url))
    assert (kicked["stalled_shards"], kicked["guids:kicked"], kicked["guids:online"]) == (0, 1, 1)
    assert (kicked["guids_with_work:kicked"], kicked["guids:offline"], kicked["guids_with_work:offline"]) == (1, 1, 0)
    assert "guids_with_work:online" not in kicked, "an online guid's work is not held back"
    action(url, job, "pause")
    assert asyncio.run(governance(url))["stalled_shards"] == 0  # a paused job is not stalled
    assert asyncio.run(governance(url))["jobs_paused_operator"] == 1


def test_the_stall_count_reads_every_quiet_guid_page_by_page(database_url: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """More quiet guids than one fetch: the slow ones (waiting longest, within their pace) do not
    hide the stuck ones behind them."""
    import pacer_reconciler.adapters.postgres as reconciler_pg

    monkeypatch.setattr(reconciler_pg, "QUIET_FETCH", 2)
    url = database_url
    slow = [f"slow-{n}-{uuid.uuid4().hex[:6]}" for n in range(4)]
    stuck = [f"stuck-{n}-{uuid.uuid4().hex[:6]}" for n in range(3)]
    job, _, _ = seed_job(url, dict.fromkeys(slow + stuck, 1))
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE shards SET status = 'running', last_progress_at = now() - interval '50 minutes'"
                     " WHERE job_id = %s AND guid = ANY(%s)", (job, slow))
        conn.execute("UPDATE shards SET status = 'running', last_progress_at = now() - interval '20 minutes'"
                     " WHERE job_id = %s AND guid = ANY(%s)", (job, stuck))
        for guid in slow:
            conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 'test')",
                         (guid, Jsonb({"min_interval_s": 7200})))
    assert asyncio.run(governance(url))["stalled_shards"] == len(stuck)


def test_a_guid_slowed_by_the_gateway_is_not_stalled_within_its_stretched_gap_and_shows_its_penalty(
        database_url: str) -> None:
    """The sender writes a guid's rate-limit penalty to its lease row; the stall count, the job
    page and the Guids page read the guid's gap stretched by it."""
    url = database_url
    guid = f"slowed-{uuid.uuid4().hex[:6]}"
    job, _, _ = seed_job(url, {guid: 1})
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE shards SET status = 'running', last_progress_at = now() - interval '20 minutes'"
                     " WHERE job_id = %s", (job,))
        # A batch send every 375 s (the online reserve): 20 minutes is past it and the 10 minutes after.
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 'test')",
                     (guid, Jsonb({"min_interval_s": 300, "jitter_s": 0})))
        conn.execute("INSERT INTO guid_leases (guid, owner, lease_until) VALUES (%s, 's1', now() + interval '1 minute')"
                     " ON CONFLICT (guid) DO UPDATE SET owner = 's1', lease_until = EXCLUDED.lease_until", (guid,))
    assert asyncio.run(governance(url))["stalled_shards"] == 1
    assert asyncio.run(job_page_stalls(url, job)) == {guid: True}
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE guid_leases SET penalty = 4 WHERE guid = %s", (guid,))  # 1,500 s between sends
    stats = asyncio.run(governance(url))
    assert stats["stalled_shards"] == 0, "four times its gap is its pace now"
    assert stats["guids_slowed"] == 1
    assert asyncio.run(job_page_stalls(url, job)) == {guid: False}

    async def shown() -> tuple[Any, Any, Any]:
        async with control_api(url, token_prefix=uuid.uuid4().hex[:8]) as api:
            r = await api.get(f"/guids/{guid}", "operator")  # the lowest role: the penalty is health
            assert r.status_code == 200, r.text
            return r.json()["penalty"], r.json()["applied_penalty"], r.json()["activity"]

    assert asyncio.run(shown()) == (4.0, 4.0, "slowed")
    with psycopg.connect(url) as conn:  # its sender died: nobody paces the guid at its penalty now
        conn.execute("UPDATE guid_leases SET lease_until = now() - interval '1 second' WHERE guid = %s", (guid,))
    stats = asyncio.run(governance(url))
    assert stats["stalled_shards"] == 1
    assert stats["guids_slowed"] == 0, "the gauge counts the guids slowed now, as the Guids page does"
    assert asyncio.run(job_page_stalls(url, job)) == {guid: True}
    assert asyncio.run(shown()) == (4.0, None, "sending"), "not slowed by anyone; the row keeps it for the next owner"
    with psycopg.connect(url) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE guid_leases SET penalty = 0.5 WHERE guid = %s", (guid,))


def test_a_guid_keeping_the_quiet_its_gateway_asked_for_is_waiting_not_stalled(database_url: str) -> None:
    """A ``Retry-After`` of an hour, kept on the guid's lease row: the stall count, the job page
    and the Guids page count the guid's quiet shard from the quiet's end, whoever holds it."""
    url = database_url
    guid = f"hushed-{uuid.uuid4().hex[:6]}"
    job, _, _ = seed_job(url, {guid: 1})
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE shards SET status = 'running', last_progress_at = now() - interval '20 minutes'"
                     " WHERE job_id = %s", (job,))
        conn.execute("INSERT INTO guid_leases (guid, gateway_quiet_until) VALUES (%s, now() + interval '40 minutes')"
                     " ON CONFLICT (guid) DO UPDATE SET gateway_quiet_until = EXCLUDED.gateway_quiet_until", (guid,))
    assert asyncio.run(governance(url))["stalled_shards"] == 0
    assert asyncio.run(job_page_stalls(url, job)) == {guid: False}

    async def shown() -> tuple[Any, Any]:
        async with control_api(url, token_prefix=uuid.uuid4().hex[:8]) as api:
            r = await api.get(f"/guids/{guid}", "operator")
            assert r.status_code == 200, r.text
            return r.json()["gateway_quiet_until"], r.json()["activity"]

    until, doing = asyncio.run(shown())
    assert until is not None and doing == "slowed", (until, doing)
    with psycopg.connect(url) as conn:  # the quiet ended long ago: the shard stalls again
        conn.execute("UPDATE guid_leases SET gateway_quiet_until = now() - interval '19 minutes' WHERE guid = %s",
                     (guid,))
    assert asyncio.run(governance(url))["stalled_shards"] == 1
    assert asyncio.run(job_page_stalls(url, job)) == {guid: True}
    assert asyncio.run(shown())[0] is None, "a quiet over is not shown"


def test_guids_keeping_a_gateway_s_quiet_and_their_in_doubt_items_are_counted_while_it_lasts(
        database_url: str) -> None:
    """A quiet on a guid's lease row, whoever holds it (here nobody): the guid and its in-doubt
    item (the verifier leaves it out meanwhile) are counted, another guid's in-doubt item is not,
    and neither once the quiet is over."""
    url = database_url
    quiet, other = f"quiet-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    seed_job(url, {quiet: 2, other: 1}, status="recovery_pending")
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO guid_leases (guid, gateway_quiet_until) VALUES (%s, now() + interval '10 minutes'),"
                     " (%s, now() - interval '1 second')", (quiet, other))
    stats = asyncio.run(governance(url))
    assert (stats["guids_quiet"], stats["in_doubt_quiet"]) == (1, 2)
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE guid_leases SET gateway_quiet_until = now() - interval '1 second' WHERE guid = %s",
                     (quiet,))
    stats = asyncio.run(governance(url))
    assert (stats["guids_quiet"], stats["in_doubt_quiet"]) == (0, 0), "its quiet is over"
