"""The Control API on a real Postgres: job, shard, item, guid and token actions, each with its
audit record; listings, pagination and the CSV report."""

from __future__ import annotations

import asyncio
import csv
import io
import random
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pacer_common import cli
from pacer_common.db.pool import open_pool
from pacer_common.domain.tokens import Role, token_hash
from pacer_control.adapters.postgres import PostgresControl
from pacer_control.core import Control
from pacer_control.domain.permissions import Principal
from tests.integration.control_support import audit, control_api, move, rows
from tests.integration.helpers import eventually, seed_job, waiting_for_locks


def status_of(url: str, job: str) -> str:
    return rows(url, "SELECT status FROM jobs WHERE job_id = %s", job)[0]["status"]


# ---- jobs -----------------------------------------------------------------------------------


def test_pause_resume_terminate_cancel_each_audited_with_before_and_after(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 2, "g2": 1})

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.post(f"/jobs/{job}/pause", "operator", json={"reason": "customer asked"})
            assert r.status_code == 200, r.text
            assert r.json() == {"outcome": "done", "changed": True, "message": "job pause: running → paused",
                                "status": "paused"}
            assert status_of(database_url, job) == "paused"

            again = await api.post(f"/jobs/{job}/pause", "operator")
            assert again.status_code == 200
            assert again.json()["outcome"] == "noop" and again.json()["changed"] is False
            assert "already paused (customer asked)" in again.json()["message"]

            r = await api.post(f"/jobs/{job}/resume", "operator")
            assert (r.status_code, r.json()["status"]) == (200, "running")

            r = await api.post(f"/jobs/{job}/terminate", "tech_admin", json={"reason": "wrong audience"})
            assert (r.status_code, r.json()["status"]) == (200, "terminated")
            # Nothing is in flight, so a terminated job may be resumed.
            r = await api.post(f"/jobs/{job}/resume", "operator")
            assert (r.status_code, r.json()["status"]) == (200, "running")

            r = await api.post(f"/jobs/{job}/cancel", "operator", json={"reason": "campaign withdrawn"})
            assert (r.status_code, r.json()["status"]) == (200, "cancelled")
            assert {x["status"] for x in rows(database_url, "SELECT status::text FROM items WHERE job_id = %s",
                                               job)} == {"abandoned"}

            r = await api.post(f"/jobs/{job}/cancel", "operator")
            assert (r.status_code, r.json()["outcome"]) == (200, "noop")
            r = await api.post(f"/jobs/{job}/pause", "operator")
            assert r.status_code == 409
            assert r.json()["detail"] == "job is cancelled; only a running job can be paused"
            r = await api.post(f"/jobs/{job}/resume", "operator")
            assert (r.status_code, r.json()["detail"]) == (409, "job is cancelled and cannot be resumed")

            missing = await api.post(f"/jobs/{uuid.uuid4()}/pause", "operator")
            assert missing.status_code == 404 and missing.json()["detail"].startswith("no job ")

    asyncio.run(go())
    log = audit(database_url, job)
    assert [(a["actor"], a["action"], a["before"]["status"], a["after"]["status"]) for a in log] == [
        ("token:operator", "pause", "running", "paused"),
        ("token:operator", "resume", "paused", "running"),
        ("token:tech_admin", "terminate", "running", "terminated"),
        ("token:operator", "resume", "terminated", "running"),
        ("token:operator", "cancel", "running", "cancelled"),
    ]
    assert log[0]["reason"] == "customer asked" and log[0]["after"]["paused_reason"] == "customer asked"
    assert log[4]["after"]["abandoned"] == len(items)


def test_a_terminated_job_resumes_only_once_nothing_is_in_flight(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 2})
    move(database_url, items[:1], "claimed")

    async def go() -> None:
        async with control_api(database_url) as api:
            assert (await api.post(f"/jobs/{job}/terminate", "tech_admin")).status_code == 200
            r = await api.post(f"/jobs/{job}/resume", "operator")
            assert r.status_code == 409
            assert "1 of its items are still in flight or in doubt" in r.json()["detail"]
            assert r.json()["status"] == "terminated"

    asyncio.run(go())
    assert status_of(database_url, job) == "terminated"
    assert [a["action"] for a in audit(database_url, job)] == ["terminate"]  # a refusal changes nothing


def test_budget_confirmation_leaves_an_operator_pause_that_names_the_budget_paused(database_url: str) -> None:
    # The operator's reason is free text: "budget_exhausted" from an operator is not the budget's pause.
    job, _, _ = seed_job(database_url, {"g1": 3})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET budget_max_sends = 1, budget_used = 1 WHERE job_id = %s", (job,))

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.post(f"/jobs/{job}/pause", "operator", json={"reason": "budget_exhausted"})
            assert r.status_code == 200 and r.json()["status"] == "paused", r.text
            r = await api.post(f"/jobs/{job}/budget", "admin", json={"max_sends": 5})
            assert r.status_code == 200 and r.json()["message"] == "budget set to 5 sends (1 used)", r.text

    asyncio.run(go())
    (row,) = rows(database_url, "SELECT status, paused_by FROM jobs WHERE job_id = %s", job)
    assert row == {"status": "paused", "paused_by": "token:operator"}, "the operator's pause stays"


def test_budget_confirmation_resumes_a_job_paused_for_its_budget(database_url: str) -> None:
    job, _, _ = seed_job(database_url, {"g1": 3})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET budget_max_sends = 1, budget_used = 1 WHERE job_id = %s", (job,))
        conn.execute("SELECT pacer_hold_job(%s, 'budget_exhausted', 'system:budget')", (job,))

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.post(f"/jobs/{job}/resume", "operator")
            assert r.status_code == 409 and "budget exhausted (1 of 1 sends used)" in r.json()["detail"]
            r = await api.post(f"/jobs/{job}/budget", "tech_admin", json={"max_sends": 5})
            assert r.status_code == 403
            assert r.json()["detail"] == "role 'tech_admin' may not confirm send budgets; needs 'admin'"
            r = await api.post(f"/jobs/{job}/budget", "admin", json={"max_sends": 1})
            assert r.status_code == 409 and "not above the 1 already used" in r.json()["detail"]
            r = await api.post(f"/jobs/{job}/budget", "admin", json={"max_sends": 0})
            assert r.status_code == 422 and "max_sends" in r.json()["detail"]
            r = await api.post(f"/jobs/{job}/budget", "admin", json={"max_sends": 5})
            assert r.status_code == 200, r.text
            assert r.json()["message"] == "budget set to 5 sends (1 used); job resumed"
            detail = (await api.get(f"/jobs/{job}", "operator")).json()
            assert detail["budget"] == {"max_sends": 5, "used": 1}
            assert detail["status"] == "running" and detail["paused_reason"] is None

    asyncio.run(go())
    confirm = [a for a in audit(database_url, job) if a["action"] == "confirm_budget"]
    assert len(confirm) == 1 and confirm[0]["actor"] == "token:admin"
    assert confirm[0]["before"] == {"budget_max_sends": 1, "budget_used": 1, "status": "paused"}
    assert confirm[0]["after"] == {"budget_max_sends": 5, "status": "running"}


def test_shard_pause_resume_and_a_shard_of_another_job_is_not_found(database_url: str) -> None:
    job, shards, _ = seed_job(database_url, {"g1": 1, "g2": 1})
    _, other_shards, _ = seed_job(database_url, {"g9": 1})

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.post(f"/jobs/{job}/shards/{shards['g1']}/pause", "operator", json={"reason": "vip"})
            assert (r.status_code, r.json()["status"]) == (200, "paused")
            r = await api.post(f"/jobs/{job}/shards/{other_shards['g9']}/pause", "operator")
            assert r.status_code == 404
            assert r.json()["detail"] == f"job {job} has no shard {other_shards['g9']}"
            detail = (await api.get(f"/jobs/{job}", "operator")).json()
            by_guid = {s["guid"]: s for s in detail["shards"]}
            assert (by_guid["g1"]["status"], by_guid["g1"]["paused_reason"]) == ("paused", "vip")
            assert by_guid["g2"]["status"] == "pending"
            r = await api.post(f"/jobs/{job}/shards/{shards['g1']}/resume", "operator")
            assert (r.status_code, r.json()["status"]) == (200, "running")

    asyncio.run(go())
    log = audit(database_url, str(shards["g1"]))
    assert [(a["action"], a["before"]["status"], a["after"]["status"]) for a in log] == [
        ("pause", "pending", "paused"), ("resume", "paused", "running")]
    assert rows(database_url, "SELECT status FROM shards WHERE shard_id = %s", other_shards["g9"])[0]["status"] \
        == "pending"


def test_job_detail_progress_shards_and_failure_categories(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 4, "g2": 2})
    move(database_url, items[:2], "failed", "needs_human")
    move(database_url, items[2:3], "waiting_retry", "retryable")
    # The reconciler's projection, as it would have counted these moves.
    with psycopg.connect(database_url) as conn:
        conn.execute("DELETE FROM shard_status_counts")
        conn.execute("INSERT INTO shard_status_counts SELECT shard_id, status, count(*) FROM items"
                     " GROUP BY shard_id, status")

    async def go() -> None:
        async with control_api(database_url) as api:
            d = (await api.get(f"/jobs/{job}", "operator")).json()
            assert d["counts"] == {"failed": 2, "pending": 3, "waiting_retry": 1}
            assert sorted((s["guid"], s["total"], sum(s["counts"].values())) for s in d["shards"]) == [
                ("g1", 4, 4), ("g2", 2, 2)]
            assert d["failures"] == [
                {"error_class": "needs_human", "total": 2, "by_status": {"failed": 2}},
                {"error_class": "retryable", "total": 1, "by_status": {"waiting_retry": 1}},
            ]
            listed = (await api.get("/jobs", "operator")).json()["jobs"]
            assert [(j["job_id"], j["total"], j["counts"]) for j in listed] == [(job, 6, d["counts"])]

    asyncio.run(go())


def test_job_detail_pages_through_every_shard_by_guid_with_the_whole_jobs_totals(database_url: str) -> None:
    # made out of guid order: the shards' ids do not follow their guids
    guids = {f"g{n:02d}": 1 + n % 3 for n in random.Random(7).sample(range(23), 23)}
    job, shards, items = seed_job(database_url, guids)
    move(database_url, items[:2], "failed", "needs_human")
    _, other_shards, _ = seed_job(database_url, {"x": 1})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE shards SET status = 'completed' WHERE shard_id = ANY(%s)", ([shards["g03"], shards["g07"]],))

    async def go() -> None:
        async with control_api(database_url) as api:
            whole = (await api.get(f"/jobs/{job}", "operator")).json()
            assert [s["guid"] for s in whole["shards"]] == sorted(guids) and whole["next_shards_after"] is None
            assert (whole["shards_total"], whole["shard_statuses"]) == (23, {"completed": 2, "pending": 21})
            assert whole["counts"] == {"pending": sum(guids.values())}
            seen: list[str] = []
            after, pages = None, 0
            while True:
                page = (await api.get(f"/jobs/{job}?shards_limit=10" + (f"&shards_after={after}" if after else ""),
                                      "operator")).json()
                pages += 1
                # the whole job's totals, whatever the page
                assert (page["counts"], page["shards_total"]) == (whole["counts"], 23)
                seen += [s["guid"] for s in page["shards"]]
                after = page["next_shards_after"]
                if after is None:
                    break
                assert after == page["shards"][-1]["shard_id"]
            assert seen == sorted(guids) and pages == 3
            bare = (await api.get(f"/jobs/{job}?shards_limit=0", "operator")).json()
            assert bare["shards"] == [] and (bare["counts"], bare["shard_statuses"]) == (
                whole["counts"], whole["shard_statuses"])
            assert bare["failures"] == whole["failures"] == [
                {"error_class": "needs_human", "total": 2, "by_status": {"failed": 2}}]
            lean = (await api.get(f"/jobs/{job}?shards_limit=5&failures=false", "operator")).json()
            assert (lean["failures"], lean["shed"], len(lean["shards"])) == ([], 0, 5)
            r = await api.get(f"/jobs/{job}?shards_limit=5&shards_after={other_shards['x']}", "operator")
            assert r.status_code == 422 and f"{other_shards['x']} is not a shard of job {job}" in r.text, r.text
            r = await api.get(f"/jobs/{job}?shards_after={shards['g01']}", "operator")
            assert r.status_code == 422 and "give shards_limit with it" in r.text, r.text

    asyncio.run(go())


def test_job_list_filters_and_before_cursor(database_url: str) -> None:
    jobs = [seed_job(database_url, {"g1": 1})[0] for _ in range(5)]
    with psycopg.connect(database_url) as conn:
        for n, job in enumerate(jobs):  # distinct creation times, oldest first
            conn.execute("UPDATE jobs SET created_at = now() - make_interval(mins => %s) WHERE job_id = %s",
                         (10 - n, job))
        conn.execute("UPDATE jobs SET status = 'paused', created_by = 'ops:bob' WHERE job_id = %s", (jobs[1],))

    async def go() -> None:
        async with control_api(database_url) as api:
            first = (await api.get("/jobs?limit=2", "operator")).json()
            assert [j["job_id"] for j in first["jobs"]] == [jobs[4], jobs[3]]
            second = (await api.get(f"/jobs?limit=2&before={first['next_before']}", "operator")).json()
            assert [j["job_id"] for j in second["jobs"]] == [jobs[2], jobs[1]]
            third = (await api.get(f"/jobs?limit=2&before={second['next_before']}", "operator")).json()
            assert ([j["job_id"] for j in third["jobs"]], third["next_before"]) == ([jobs[0]], None)
            paused = (await api.get("/jobs?status=paused", "operator")).json()["jobs"]
            assert [j["job_id"] for j in paused] == [jobs[1]]
            assert [j["job_id"] for j in (await api.get("/jobs?created_by=ops:bob", "operator")).json()["jobs"]] \
                == [jobs[1]]
            r = await api.get("/jobs?status=sleeping", "operator")
            assert r.status_code == 422 and r.json()["detail"].startswith("invalid request: query.status:")
            r = await api.get("/jobs?limit=501", "operator")
            assert r.status_code == 422
            r = await api.get(f"/jobs?before={uuid.uuid4()}", "operator")
            assert r.status_code == 404 and "'before' cursor" in r.json()["detail"]

    asyncio.run(go())


# ---- retries and items ----------------------------------------------------------------------


def test_retry_by_filter_creates_compensations_with_one_audit_record(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 3, "g2": 3})
    g1 = [i for i in items if rows(database_url, "SELECT guid FROM items WHERE item_id = %s", i)[0]["guid"] == "g1"]
    g2 = [i for i in items if i not in g1]
    move(database_url, g1, "failed", "needs_human")
    move(database_url, g2[:1], "failed", "needs_human")
    move(database_url, g2[1:2], "failed", "bad_params")

    async def go() -> None:
        async with control_api(database_url) as api:
            body = {"filter": {"status": "failed", "error_class": "needs_human", "guid": "g1"}, "reason": "back online"}
            r = await api.post(f"/jobs/{job}/retry", "operator", json=body)
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["totals"] == {"created": 3, "already_queued": 0, "already_delivered": 0, "conflict": 0,
                                     "refused": 0, "not_found": 0}
            assert sorted(x["item_id"] for x in out["results"]) == sorted(g1)
            created = {x["new_item"] for x in out["results"]}
            comps = rows(database_url, "SELECT item_id::text, compensates::text, status::text, guid FROM items"
                                       " WHERE compensates IS NOT NULL")
            assert {c["item_id"] for c in comps} == created
            assert {c["compensates"] for c in comps} == set(g1)
            assert {(c["status"], c["guid"]) for c in comps} == {("pending", "g1")}

            # The same filter again: those items are retried already (their compensations stand for them).
            again = (await api.post(f"/jobs/{job}/retry", "operator", json=body)).json()
            assert again["totals"]["created"] == 0 and again["results"] == []

            # By id: a pending item is already queued, a foreign id is not part of the job.
            stranger = str(uuid.uuid4())
            by_id = await api.post(f"/jobs/{job}/retry", "operator",
                                   json={"item_ids": [g2[1], g2[2], stranger]})
            got = {x["item_id"]: x["outcome"] for x in by_id.json()["results"]}
            assert got == {g2[1]: "created", g2[2]: "already_queued", stranger: "not_found"}

            r = await api.post(f"/jobs/{job}/retry", "operator", json={"filter": {"status": "pending"}})
            assert r.status_code == 422
            # Unverified sends are never picked (each would be a conflict): where they are decided instead.
            r = await api.post(f"/jobs/{job}/retry", "operator", json={"filter": {"status": "unverified"}})
            assert r.status_code == 422
            assert "In doubt page" in r.json()["detail"] and "POST /api/v1/items/{id}/resolve" in r.json()["detail"]
            doc = (await api.client.get("http://control/api/v1/openapi.json")).json()
            statuses = doc["components"]["schemas"]["RetryFilterBody"]["properties"]["status"]["enum"]
            assert statuses == ["failed", "expired", "abandoned"]
            # The document says what each action may answer besides the obvious.
            said = {path.removeprefix("/api/v1"): op["post"]["summary"] + " " + op["post"].get("description", "")
                    for path, op in doc["paths"].items() if "post" in op}
            assert "or completes with nothing left to send" in said["/jobs/{job_id}/approve"]
            assert "one with nothing left open completes" in said["/jobs/{job_id}/resume"]
            assert "Cancelling a cancelled job abandons" in said["/jobs/{job_id}/cancel"]
            assert "completes, and its job with it" in said["/jobs/{job_id}/shards/{shard_id}/resume"]
            assert "unless its job is cancelled or it has expired" in said["/items/{item_id}/resolve"]
            r = await api.post(f"/jobs/{job}/retry", "operator", json={})
            assert r.status_code == 422 and "either 'item_ids' or 'filter'" in r.json()["detail"]
            r = await api.post(f"/jobs/{uuid.uuid4()}/retry", "operator", json={"filter": {}})
            assert r.status_code == 404

    asyncio.run(go())
    log = [a for a in audit(database_url, job) if a["action"] == "retry"]
    assert len(log) == 3  # one per bulk request, whatever the number of items
    assert log[0]["actor"] == "token:operator" and log[0]["reason"] == "back online"
    assert log[0]["before"] == {"filter": {"status": "failed", "error_class": "needs_human", "guid": "g1"},
                                "matched": 3}
    assert log[0]["after"]["created"] == 3
    assert log[2]["after"] == {"created": 1, "already_queued": 1, "already_delivered": 0, "conflict": 0,
                               "refused": 0, "not_found": 1}


def test_a_bulk_retry_holds_no_job_row_while_it_waits_for_a_shards_count(database_url: str) -> None:
    """A reconciler segment holds its shards' counts and rows while it waits for their job's
    row. A bulk retry takes them in the same order: the counts, the shards, and only then the
    job, so while it waits for a shard's count another transaction takes the job's row at once
    (no deadlock to wait for). Let through, it has counted its compensations on every shard
    and on the job, and run the completed job and its shards again."""
    url = database_url
    job, shards, items = seed_job(url, {"g1": 1, "g2": 1})
    move(url, items, "failed", "needs_human")
    with psycopg.connect(url) as conn:  # as the reconciler leaves a finished job
        conn.execute("UPDATE shards SET status = 'completed' WHERE job_id = %s", (job,))
        conn.execute("UPDATE jobs SET status = 'completed', started_at = now(), finished_at = now()"
                     " WHERE job_id = %s", (job,))
    last = max(shards.values())  # shards are taken in id order: the retry waits at the last one's count

    async def go() -> dict[str, Any]:
        async with control_api(url) as api:
            holder = await psycopg.AsyncConnection.connect(url)
            try:
                await holder.execute("SELECT 1 FROM shard_status_counts WHERE shard_id = %s AND status = 'pending'"
                                     " FOR UPDATE", (last,))
                retry = asyncio.create_task(api.post(f"/jobs/{job}/retry", "operator",
                                                     json={"filter": {"status": "failed"}}))
                await eventually(lambda: waiting_for_locks(url), 10, "the retry waiting for the last shard's count")
                async with await psycopg.AsyncConnection.connect(url) as other:
                    await other.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE NOWAIT", (job,))
                    await other.rollback()
                await holder.rollback()
                r = await retry
            finally:
                await holder.close()
            assert r.status_code == 200, r.text
            return dict(r.json()["totals"])

    assert asyncio.run(go())["created"] == 2
    assert rows(url, "SELECT status, total, finished_at IS NULL AS open FROM jobs WHERE job_id = %s", job) == [
        {"status": "running", "total": 4, "open": True}]
    assert rows(url, "SELECT status, total FROM shards WHERE job_id = %s ORDER BY shard_id", job) == [
        {"status": "running", "total": 2}] * 2


def test_single_item_retry_and_cancel_are_audited(database_url: str) -> None:
    _, _, (a, b) = seed_job(database_url, {"g1": 2})
    move(database_url, [a], "failed", "bad_params")

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.post(f"/items/{a}/retry", "operator", json={"reason": "fixed the template"})
            assert r.status_code == 200, r.text
            assert r.json()["result"] == "created" and r.json()["new_item"]
            r2 = await api.post(f"/items/{a}/retry", "operator")
            assert r2.status_code == 409
            assert r2.json()["detail"] == "a retry of this item is already in progress"

            c = await api.post(f"/items/{b}/cancel", "operator")
            assert (c.status_code, c.json()["status"]) == (200, "abandoned")
            c2 = await api.post(f"/items/{b}/cancel", "operator")
            assert (c2.status_code, c2.json()["detail"]) == (409, "this item is already abandoned")
            assert (await api.post(f"/items/{uuid.uuid4()}/cancel", "operator")).status_code == 404

    asyncio.run(go())
    retries = audit(database_url, a)
    assert [(x["action"], x["before"], x["after"]["outcome"]) for x in retries] == [
        ("retry", {"status": "failed"}, "created"), ("retry", {"status": "failed"}, "conflict")]
    assert retries[0]["reason"] == "fixed the template"
    cancels = audit(database_url, b)
    assert [(x["action"], x["after"]) for x in cancels] == [
        ("cancel", {"outcome": "cancelled", "status": "abandoned"}),
        ("cancel", {"outcome": "already_final", "status": "abandoned"})]


def test_items_filters_and_keyset_pages(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 4, "g2": 3})
    failed = sorted(items)[:2]
    move(database_url, failed, "failed", "needs_human")

    async def go() -> None:
        async with control_api(database_url) as api:
            seen: list[str] = []
            after = None
            pages = 0
            while True:
                q = f"/jobs/{job}/items?limit=3" + (f"&after={after}" if after else "")
                page = (await api.get(q, "operator")).json()
                seen += [i["item_id"] for i in page["items"]]
                pages += 1
                after = page["next_after"]
                if after is None:
                    break
            assert seen == sorted(items) and pages == 3

            g2 = (await api.get(f"/jobs/{job}/items?guid=g2", "operator")).json()["items"]
            assert len(g2) == 3 and {i["guid"] for i in g2} == {"g2"}
            pending = (await api.get(f"/jobs/{job}/items?status=pending", "operator")).json()["items"]
            assert len(pending) == 5
            by_class = (await api.get(f"/jobs/{job}/items?error_class=needs_human", "operator")).json()["items"]
            assert sorted(i["item_id"] for i in by_class) == failed

            f = (await api.get(f"/jobs/{job}/failed", "operator")).json()
            assert [(i["item_id"], i["status"], i["last_error_class"]) for i in f["items"]] == [
                (x, "failed", "needs_human") for x in failed]
            f1 = (await api.get(f"/jobs/{job}/failed?limit=1", "operator")).json()
            assert [i["item_id"] for i in f1["items"]] == failed[:1] and f1["next_after"] == failed[0]
            f2 = (await api.get(f"/jobs/{job}/failed?limit=1&after={f1['next_after']}", "operator")).json()
            assert [i["item_id"] for i in f2["items"]] == failed[1:]

            assert (await api.get(f"/jobs/{uuid.uuid4()}/items", "operator")).status_code == 404
            assert (await api.get(f"/jobs/{job}/items?after=nope", "operator")).status_code == 422

    asyncio.run(go())


def test_report_csv_streams_every_item(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 3, "=cmd": 1})
    move(database_url, items[:1], "failed", "bad_params")

    async def go() -> str:
        async with control_api(database_url) as api:
            r = await api.get(f"/jobs/{job}/report.csv", "operator")
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/csv")
            assert r.headers["content-disposition"] == f'attachment; filename="pacer-report-req-{job}.csv"'
            return r.text

    text = asyncio.run(go())
    lines = list(csv.reader(io.StringIO(text)))
    assert lines[0] == ["item_id", "guid", "to_id", "status", "attempts", "last_error_class", "last_error",
                        "updated_at"]
    body = {line[0]: line for line in lines[1:]}
    assert sorted(body) == sorted(items)
    db = {r["item_id"]: r for r in rows(database_url, "SELECT item_id::text, guid, to_id, status::text, attempts,"
                                                      " last_error_class FROM items WHERE job_id = %s", job)}
    for item_id, line in body.items():
        r = db[item_id]
        guid = "'" + r["guid"] if r["guid"].startswith("=") else r["guid"]  # no formulas in spreadsheets
        assert line[1:6] == [guid, r["to_id"], r["status"], str(r["attempts"]), r["last_error_class"] or ""]
    assert body[items[0]][3:7] == ["failed", "0", "bad_params", "test: bad_params"]


# ---- guids ----------------------------------------------------------------------------------


def test_guid_pause_resume_and_forced_lease_release(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("SELECT * FROM pacer_acquire_guids(ARRAY['g1'], 'sender-a', interval '30 seconds')")
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.post("/guids/g1/pause", "operator", json={"reason": "kicked offline"})
            assert (r.status_code, r.json()["outcome"]) == (200, "done")
            again = (await api.post("/guids/g1/pause", "operator", json={"reason": "x"})).json()
            assert again["outcome"] == "noop" and "already paused (kicked offline)" in again["message"]

            health = (await api.get("/guids/g1", "operator")).json()
            assert health.pop("backlog")["by_lane"] == {"batch": {"ready": 1}}
            assert health == {"guid": "g1", "paused": True, "paused_reason": "kicked offline",
                              "paused_by": "token:operator", "paused_at": health["paused_at"], "state": "online",
                              "state_since": None, "state_source": None, "state_reason": None, "held": True,
                              "activity": None, "quiet_until": None, "capped_until": None,  # held: what it is doing is the hold
                              "penalty": None, "applied_penalty": None, "gateway_quiet_until": None}
            full = (await api.get("/guids/g1", "tech_admin")).json()
            assert (full["owner"], full["epoch"], full["expired"]) == ("sender-a", 1, False)
            paused = (await api.get("/guids?paused=true", "operator")).json()["guids"]
            assert [g["guid"] for g in paused] == ["g1"] and "owner" not in paused[0]

            r = await api.post("/guids/g1/release-lock", "tech_admin", json={"reason": "x"})
            assert r.status_code == 403
            r = await api.post("/guids/g1/release-lock", "admin")
            assert r.status_code == 422  # a forced release must say why
            r = await api.post("/guids/g1/release-lock", "admin", json={"reason": "sender host is gone"})
            assert r.status_code == 200, r.text
            body = r.json()
            assert "The holder is fenced" in body["message"] and "now epoch 2" in body["message"]
            assert (body["previous_owner"], body["epoch"]) == ("sender-a", 2)
            again = (await api.post("/guids/g1/release-lock", "admin", json={"reason": "again"})).json()
            assert again["outcome"] == "noop"
            assert (await api.post("/guids/nobody/release-lock", "admin", json={"reason": "x"})).status_code == 404

            r = await api.post("/guids/g1/resume", "operator")
            assert (r.status_code, r.json()["outcome"]) == (200, "done")
            r = await api.post("/guids/g1/resume", "operator")
            assert (r.status_code, r.json()["outcome"]) == (200, "noop")
            assert (await api.post("/guids/nobody/resume", "operator")).status_code == 404
            assert (await api.get("/guids/nobody", "operator")).status_code == 404

    asyncio.run(go())
    # Fencing: the old holder can no longer begin a send; the release moved the epoch to 2, the
    # next acquirer gets 3.
    with psycopg.connect(database_url) as conn:
        (outcome,) = conn.execute("SELECT outcome FROM pacer_begin_send(%s, 'sender-a', interval '30 seconds',"
                                  " 'k', 'g1', 'room-0')", (item,)).fetchone()
        assert outcome == "guid_lost"
        (epoch,) = conn.execute("SELECT epoch FROM pacer_acquire_guids(ARRAY['g1'], 'sender-b',"
                                " interval '30 seconds')").fetchone()
        assert epoch == 3
    log = audit(database_url, "g1")
    assert [(a["actor"], a["action"]) for a in log] == [
        ("token:operator", "pause"), ("token:admin", "release_lock"), ("token:operator", "resume")]
    assert log[1]["before"]["owner"] == "sender-a" and log[1]["after"]["owner"] is None
    assert log[1]["reason"] == "sender host is gone"


def test_a_guid_lifecycle_is_visible_with_its_history_and_an_operator_resume_sets_it_online(
        database_url: str) -> None:
    seed_job(database_url, {"gk": 2})
    with psycopg.connect(database_url) as conn:
        for state, source, ts in (("offline", "callback", "2026-11-30T09:00:00Z"),
                                  ("kicked", "send_failure", "2026-11-30T09:05:00Z"),
                                  ("online", "callback", "2026-11-30T09:01:00Z")):  # late: ignored
            conn.execute("SELECT * FROM pacer_set_guid_state('gk', %s, %s, 'why', %s)", (state, source, ts))

    async def go() -> None:
        async with control_api(database_url) as api:
            g = (await api.get("/guids/gk", "operator")).json()
            assert (g["state"], g["state_source"], g["held"], g["paused"]) == ("kicked", "send_failure", True, False)
            kicked = (await api.get("/guids?state=kicked", "operator")).json()["guids"]
            assert [x["guid"] for x in kicked] == ["gk"]
            assert [x["guid"] for x in (await api.get("/guids?paused=true", "operator")).json()["guids"]] == ["gk"]
            assert (await api.get("/guids?state=online", "operator")).json()["guids"] == []
            hist = (await api.get("/guids/gk/history?limit=1", "operator")).json()
            assert [(c["previous"], c["state"]) for c in hist["changes"]] == [("offline", "kicked")]
            older = (await api.get(f"/guids/gk/history?before={hist['next_before']}", "operator")).json()
            assert [(c["previous"], c["state"]) for c in older["changes"]] == [(None, "offline")]
            r = await api.post("/guids/gk/resume", "operator", json={"reason": "re-logged in"})
            assert (r.status_code, r.json()["outcome"]) == (200, "done") and "kicked" in r.json()["message"]
            g = (await api.get("/guids/gk", "operator")).json()
            assert (g["state"], g["state_source"], g["state_reason"], g["held"]) == \
                ("online", "operator", "re-logged in", False)

    asyncio.run(go())
    assert [(a["action"], a["before"]["state"], a["after"]["state"]) for a in audit(database_url, "gk")] == [
        ("resume", "kicked", "online")]
    with psycopg.connect(database_url) as conn:  # the release of its held items was requested
        assert conn.execute("SELECT count(*) FROM hold_releases WHERE scope = 'guid' AND key = 'gk'").fetchone() == (1,)


def test_an_item_waiting_for_its_media_or_its_guid_says_so(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"gm": 2, "gk": 1, "gr": 1})
    move(database_url, items[3:], "waiting_retry")
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE items SET not_before = now() + interval '1 minute', last_error_class = 'media_pending',"
                     " last_error = 'waiting for image m-1 to be ready' WHERE guid = 'gm'")
        conn.execute("SELECT * FROM pacer_set_guid_state('gk', 'offline', 'callback', 'phone off', now())")
        # said in UTC, to the second, whatever the session's time zone
        conn.execute(sql.SQL("ALTER DATABASE {} SET timezone = 'Asia/Shanghai'").format(
            sql.Identifier(conn.info.dbname)))
        conn.execute("UPDATE items SET next_attempt_at = '2030-01-02 03:04:05.678+00' WHERE guid = 'gr'")

    async def go() -> dict[str, str | None]:
        async with control_api(database_url) as api:
            page = (await api.get(f"/jobs/{job}/items", "operator")).json()
            return {i["guid"] + ":" + i["to_id"]: i["waiting"] for i in page["items"]}

    waiting = asyncio.run(go())
    assert sorted(str(w) for w in waiting.values()) == ["waiting: guid offline: phone off",
                                                        "waiting: retry due at 2030-01-02 03:04:05 UTC",
                                                        "waiting: waiting for image m-1 to be ready",
                                                        "waiting: waiting for image m-1 to be ready"]


@pytest.mark.parametrize("had_overrides", [True, False])
def test_a_limits_change_audits_what_it_replaced_when_another_change_commits_first(
        database_url: str, had_overrides: bool) -> None:
    # Another change of g7's limits (`pacer limits`, another admin) is not committed yet when
    # this one starts; this one must record the other's result as its "before", not what was
    # there before both.
    if had_overrides:
        with psycopg.connect(database_url) as conn:
            conn.execute("""INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('g7', '{"per_hour": 100}', 'seed')""")

    async def go() -> None:
        async with control_api(database_url) as api, await psycopg.AsyncConnection.connect(database_url) as other:
            await other.execute("""INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('g7', '{"per_hour": 200}', 'cli')
                                   ON CONFLICT (guid) DO UPDATE SET limits = EXCLUDED.limits, updated_by = 'cli'""")
            change = asyncio.create_task(api.call("PUT", "/guids/g7/limits", "tech_admin", json={"min_interval_s": 3}))
            await eventually(lambda: waiting_for_locks(database_url), 15, "the API's change waiting for the other")
            await other.commit()
            r = await change
            assert r.status_code == 200 and r.json()["limits"] == {"min_interval_s": 3.0, "per_hour": 200}, r.text

    asyncio.run(go())
    (entry,) = audit(database_url, "g7")
    assert (entry["before"], entry["after"]) == ({"limits": {"per_hour": 200}},
                                                 {"limits": {"min_interval_s": 3.0, "per_hour": 200}})


def test_hot_limits_are_validated_stored_and_audited(database_url: str) -> None:
    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.call("PUT", "/guids/g7/limits", "operator", json={"min_interval_s": 3})
            assert r.status_code == 403
            r = await api.call("PUT", "/guids/g7/limits?reason=complaints", "tech_admin",
                               json={"min_interval_s": 3, "quiet_hours": "22:00-08:00"})
            assert r.status_code == 200, r.text
            assert r.json()["limits"] == {"min_interval_s": 3.0, "quiet_hours": "22:00-08:00"}
            r = await api.call("PUT", "/guids/g7/limits", "tech_admin", json={"per_hour": 300})
            assert r.json()["limits"] == {"min_interval_s": 3.0, "quiet_hours": "22:00-08:00", "per_hour": 300}
            for bad, why in [({"min_interval": 3}, "unknown limit"), ({"online_reserve": 1.5}, "online_reserve"),
                             ({"quiet_hours": "late"}, "22:00-08:00"), ({}, "at least one limit")]:
                r = await api.call("PUT", "/guids/g7/limits", "tech_admin", json=bad)
                assert r.status_code == 422 and why in r.json()["detail"], (bad, r.text)
            full = (await api.get("/guids/g7", "tech_admin")).json()
            assert full["limits"]["per_hour"] == 300

    asyncio.run(go())
    (row,) = rows(database_url, "SELECT limits, updated_by FROM guid_limits WHERE guid = 'g7'")
    assert row == {"limits": {"min_interval_s": 3.0, "quiet_hours": "22:00-08:00", "per_hour": 300},
                   "updated_by": "token:tech_admin"}
    log = audit(database_url, "g7")
    assert [(a["action"], a["before"], a["after"]) for a in log] == [
        ("set_limits", {"limits": None}, {"limits": {"min_interval_s": 3.0, "quiet_hours": "22:00-08:00"}}),
        ("set_limits", {"limits": {"min_interval_s": 3.0, "quiet_hours": "22:00-08:00"}},
         {"limits": {"min_interval_s": 3.0, "quiet_hours": "22:00-08:00", "per_hour": 300}}),
    ]
    assert log[0]["reason"] == "complaints"


# ---- tokens and the audit log ---------------------------------------------------------------


def test_tokens_create_use_list_and_revoke(database_url: str) -> None:
    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.post("/tokens", "tech_admin", json={"name": "carol", "role": "operator"})
            assert (r.status_code, r.json()["detail"]) == (
                403, "role 'tech_admin' may not create API tokens; needs 'admin'")
            r = await api.post("/tokens", "admin", json={"name": "carol", "role": "operator"})
            assert r.status_code == 201, r.text
            secret = r.json()["token"]
            carol = {"Authorization": f"Bearer {secret}"}
            assert (await api.client.get("/jobs", headers=carol)).status_code == 200
            r = await api.client.post(f"/jobs/{uuid.uuid4()}/terminate", headers=carol)
            assert (r.status_code, r.json()["detail"]) == (
                403, "role 'operator' may not terminate jobs; needs 'tech_admin'")

            listed = (await api.get("/tokens", "admin")).json()
            assert {t["name"] for t in listed} == {"operator", "tech_admin", "admin", "carol"}
            assert secret not in str(listed) and all("token" not in t for t in listed)
            carol_row = next(t for t in listed if t["name"] == "carol")
            assert carol_row["created_by"] == "token:admin" and carol_row["last_used_at"] is not None

            dup = await api.post("/tokens", "admin", json={"name": "carol", "role": "admin"})
            assert dup.status_code == 409 and "already exists" in dup.json()["detail"]

            r = await api.call("DELETE", "/tokens/carol", "admin")
            assert (r.status_code, r.json()["outcome"]) == (200, "done")
            r = await api.client.get("/jobs", headers=carol)
            assert (r.status_code, r.json()["detail"]) == (401, "unknown or revoked token")
            assert r.headers["www-authenticate"] == "Bearer"
            assert (await api.call("DELETE", "/tokens/carol", "admin")).json()["outcome"] == "noop"
            assert (await api.call("DELETE", "/tokens/nobody", "admin")).status_code == 404

            r = await api.client.get("/jobs")
            assert (r.status_code, r.json()["detail"]) == (
                401, "missing bearer token: send 'Authorization: Bearer <token>'")
            r = await api.client.get("/jobs", headers={"Authorization": "Basic abc"})
            assert r.status_code == 401

    asyncio.run(go())
    (stored,) = rows(database_url, "SELECT token_hash, role, revoked_at FROM api_tokens WHERE name = 'carol'")
    assert len(stored["token_hash"]) == 64 and stored["revoked_at"] is not None
    assert [(a["actor"], a["action"]) for a in audit(database_url, "carol")] == [
        ("token:admin", "create_token"), ("token:admin", "revoke_token")]


def test_a_token_creation_retried_after_its_commit_answers_the_token_it_made(database_url: str) -> None:
    """The unit of work runs again after a commit whose answer was lost (as the store's retry
    does on a dropped connection): the second run finds the token the first one made and
    answers its secret, not "already exists" (the admin would never see the secret)."""

    class AnswerLost(PostgresControl):
        async def atomically(self, work: Any) -> Any:
            await super().atomically(work)  # committed; its answer never arrives
            return await super().atomically(work)

    async def go() -> Any:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            control = Control(AnswerLost(pool), frozenset())
            return await control.create_token("dana", Role.OPERATOR, Principal("root", Role.ADMIN))
        finally:
            await pool.close()

    made = asyncio.run(go())
    (stored,) = rows(database_url, "SELECT token_hash, role FROM api_tokens WHERE name = 'dana'")
    assert stored == {"token_hash": token_hash(made.token), "role": "operator"}, "the answer is the stored token"
    assert len([a for a in audit(database_url, "dana") if a["action"] == "create_token"]) == 1


def test_a_token_name_taken_by_another_token_is_a_409_that_says_how_to_find_and_revoke_it(database_url: str) -> None:
    async def go() -> None:
        async with control_api(database_url) as api:
            assert (await api.post("/tokens", "admin", json={"name": "erin", "role": "operator"})).status_code == 201
            again = await api.post("/tokens", "admin", json={"name": "erin", "role": "operator"})
            assert again.status_code == 409 and "token" not in again.json(), again.text
            detail = again.json()["detail"]
            assert "already exists" in detail and "GET /tokens" in detail and "DELETE /tokens/erin" in detail, detail

    asyncio.run(go())


def test_audit_log_filters_and_pages(database_url: str) -> None:
    jobs = [seed_job(database_url, {"g1": 1})[0] for _ in range(3)]

    async def go() -> None:
        async with control_api(database_url) as api:
            for job in jobs:
                await api.post(f"/jobs/{job}/pause", "operator")
            await api.post("/guids/g1/pause", "tech_admin", json={"reason": "x"})

            newest = (await api.get("/audit?limit=2", "operator")).json()
            assert [(e["target_type"], e["action"]) for e in newest["entries"]] == [("guid", "pause"), ("job", "pause")]
            older = (await api.get(f"/audit?limit=2&before={newest['next_before']}", "operator")).json()
            assert [e["target_id"] for e in older["entries"]] == [jobs[1], jobs[0]]
            first_id = older["entries"][-1]["id"]
            async def three_after_first() -> dict[str, Any] | None:  # held back while a transaction is open
                page = (await api.get(f"/audit?after={first_id}", "operator")).json()
                return page if len(page["entries"]) >= 3 else None

            tail = await eventually(three_after_first, what="the audit tail after the first entry")
            assert [e["target_id"] for e in tail["entries"]] == [jobs[1], jobs[2], "g1"]
            assert tail["next_after"] == tail["entries"][-1]["position"]
            by_actor = (await api.get("/audit?actor=token:tech_admin", "operator")).json()["entries"]
            assert [e["target_id"] for e in by_actor] == ["g1"]
            one = (await api.get(f"/audit?target_type=job&target_id={jobs[0]}", "operator")).json()["entries"]
            assert [(e["action"], e["before"], e["after"]["status"]) for e in one] == [
                ("pause", {"status": "running", "paused_reason": None}, "paused")]
            r = await api.get("/audit?after=1&before=5", "operator")
            assert r.status_code == 422

    asyncio.run(go())


# ---- tools ----------------------------------------------------------------------------------


def test_test_send_reaches_only_sandbox_targets_and_is_queued_as_a_one_item_job(database_url: str) -> None:
    async def go() -> dict[str, Any]:
        async with control_api(database_url, sandbox_targets=["sandbox-room"]) as api:
            body = {"guid": "g1", "to_id": "sandbox-room", "content": "hello from the runbook"}
            r = await api.post("/test-send", "operator", json=body)
            assert r.status_code == 403 and "needs 'tech_admin'" in r.json()["detail"]
            r = await api.post("/test-send", "tech_admin", json={**body, "to_id": "a-customer"})
            assert r.status_code == 403
            assert r.json()["detail"] == ("to_id 'a-customer' is not a sandbox target; test sends may only "
                                          "go to sandbox-room (PACER_CONTROL_SANDBOX_TARGETS)")
            r = await api.post("/test-send", "tech_admin", json=body)
            assert r.status_code == 200, r.text
            return r.json()

    made = asyncio.run(go())
    assert made["queued"] is True and made["idem_key"] == f"test:{made['item_id']}"
    # One pending item of a running one-item job, created by an event the reconciler turns into
    # its command: from there the senders treat it like any other item.
    (item,) = rows(database_url, "SELECT i.guid, i.to_id, i.content, i.status::text AS status, i.idem_key,"
                                 " j.status AS job_status, j.created_by FROM items i JOIN jobs j USING (job_id)"
                                 " WHERE i.item_id = %s", made["item_id"])
    assert item == {"guid": "g1", "to_id": "sandbox-room", "content": "hello from the runbook", "status": "pending",
                    "idem_key": made["idem_key"], "job_status": "running", "created_by": "token:tech_admin"}
    assert rows(database_url, "SELECT type, to_status::text AS s FROM item_events WHERE item_id = %s",
                made["item_id"]) == [{"type": "ItemTestSendCreated", "s": "pending"}]
    assert rows(database_url, "SELECT count(*) AS n FROM items") == [{"n": 1}]  # the refused ones made nothing
    (entry,) = audit(database_url, "g1")
    assert (entry["actor"], entry["action"], entry["after"]["to_id"], entry["after"]["item_id"]) == (
        "token:tech_admin", "test_send", "sandbox-room", made["item_id"])


def test_a_test_send_goes_through_the_gateway_of_the_tenant_holding_the_guid(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, base_url) VALUES ('acme', 'http://acme')")
        conn.execute("INSERT INTO tenant_guids (guid, tenant) VALUES ('acme-guid', 'acme')")

    async def go() -> list[dict[str, Any]]:
        async with control_api(database_url, sandbox_targets=["sandbox-room"]) as api:
            made = []
            for guid in ("acme-guid", "new-guid"):
                r = await api.post("/test-send", "tech_admin",
                                   json={"guid": guid, "to_id": "sandbox-room", "content": "hi"})
                assert r.status_code == 200, r.text
                made.append(r.json())
            return made

    acme, new = asyncio.run(go())
    # The job is the guid's tenant's, and so is the command the reconciler publishes for its
    # item: the sender sends it with that tenant's gateway URL and credential.
    assert rows(database_url, "SELECT j.tenant AS job, c.tenant AS command FROM items i JOIN jobs j USING (job_id)"
                              " CROSS JOIN LATERAL pacer_item_command(i) c WHERE i.item_id = %s",
                acme["item_id"]) == [{"job": "acme", "command": "acme"}]
    # A guid no tenant holds yet is sent as 'default''s and stays unclaimed: a test send does
    # not decide which tenant's the guid becomes (the first job naming it does).
    assert rows(database_url, "SELECT j.tenant FROM items i JOIN jobs j USING (job_id) WHERE i.item_id = %s",
                new["item_id"]) == [{"tenant": "default"}]
    assert rows(database_url, "SELECT guid, tenant FROM tenant_guids ORDER BY guid") == [
        {"guid": "acme-guid", "tenant": "acme"}]


def test_a_test_send_retried_after_its_commit_queues_one_message(database_url: str) -> None:
    """The unit of work runs again after a commit whose answer was lost (as the store's retry
    does on a dropped connection): the second run finds the send the first one made."""

    class AnswerLost(PostgresControl):
        async def atomically(self, work: Any) -> Any:
            await super().atomically(work)  # committed; its answer never arrives
            return await super().atomically(work)

    async def go() -> dict[str, Any]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            control = Control(AnswerLost(pool), frozenset({"sandbox-room"}))
            return await control.test_send("g1", "sandbox-room", "hi", Principal("ops", Role.TECH_ADMIN))
        finally:
            await pool.close()

    made = asyncio.run(go())
    assert rows(database_url, "SELECT item_id::text AS item_id, job_id::text AS job_id FROM items") == [
        {"item_id": made["item_id"], "job_id": made["job_id"]}]
    assert [a["after"]["item_id"] for a in audit(database_url) if a["action"] == "test_send"] == [made["item_id"]]


def test_test_send_is_refused_when_no_sandbox_is_configured(database_url: str) -> None:
    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.post("/test-send", "admin", json={"guid": "g1", "to_id": "x", "content": "y"})
            assert (r.status_code, r.json()["detail"]) == (
                403, "test sends are disabled: PACER_CONTROL_SANDBOX_TARGETS lists no sandbox target")

    asyncio.run(go())
    assert [a for a in audit(database_url) if a["action"] == "test_send"] == []


def test_cli_token_create_prints_the_token_once_and_audits_it(database_url: str, monkeypatch: Any,
                                                              capsys: Any) -> None:
    monkeypatch.setenv("PACER_DATABASE_URL", database_url)
    with pytest.raises(SystemExit) as done:
        cli.main(["token", "create", "--name", "root", "--role", "admin"])
    assert done.value.code == 0
    token = capsys.readouterr().out.strip()
    (row,) = rows(database_url, "SELECT name, role, created_by, token_hash FROM api_tokens")
    assert row == {"name": "root", "role": "admin", "created_by": "cli", "token_hash": token_hash(token)}
    (entry,) = audit(database_url, "root")
    assert (entry["actor"], entry["action"], entry["after"]) == ("cli", "create_token", {"role": "admin"})
    with pytest.raises(SystemExit) as again:
        cli.main(["token", "create", "--name", "root", "--role", "operator"])
    assert again.value.code == cli.EXIT_REFUSED
    assert "already exists" in capsys.readouterr().err

    async def use() -> int:
        async with control_api(database_url) as api:
            r = await api.client.get("/tokens", headers={"Authorization": f"Bearer {token}"})
            return r.status_code

    assert asyncio.run(use()) == 200


def test_malformed_requests_get_a_readable_422(database_url: str) -> None:
    job, _, _ = seed_job(database_url, {"g1": 1})

    async def go() -> None:
        async with control_api(database_url) as api:
            h = {**api.auth("admin"), "Content-Type": "application/json"}
            r = await api.client.post(f"/jobs/{job}/budget", headers=h, content=b"{not json")
            assert r.status_code == 422 and r.json()["detail"].startswith("invalid request: body")
            r = await api.client.post(f"/jobs/{job}/pause", headers=h, content=b'{"reason": "a\\u0000b"}')
            assert r.status_code == 422 and "body.reason" in r.json()["detail"]
            r = await api.client.get("/jobs/not-a-uuid", headers=h)
            assert r.status_code == 422 and r.json()["detail"].startswith("invalid request: path.job_id")
            r = await api.post("/dry-run", "operator", json={"request_id": "r", "kind": "campaign"})
            assert r.status_code == 422
            assert r.json()["detail"] == ("invalid job request: created_by: Field required; message: Field "
                                          "required; targets: Field required")

    asyncio.run(go())


def test_only_held_lists_every_paused_or_not_online_guid_and_no_other_page_by_page(database_url: str) -> None:
    """Every combination of a lease row (none, running, paused) and a state row (none, online,
    offline, kicked), three guids each: ``paused=true`` pages through exactly the held ones,
    and ``state=`` through exactly that state (``online`` includes guids with no state row)."""
    leases, states = (None, "running", "paused"), (None, "online", "offline", "kicked")
    expected_held: list[str] = []
    by_state: dict[str, list[str]] = {"online": [], "offline": [], "kicked": []}
    with psycopg.connect(database_url) as conn:
        for li, lease in enumerate(leases):
            for si, state in enumerate(states):
                for n in range(3):
                    guid = f"h{li}{si}{n}"
                    if lease is None and state is None:
                        continue  # a guid that never held a lease nor had a state is not listed
                    if lease is not None:
                        conn.execute("SELECT * FROM pacer_acquire_guids(ARRAY[%s], 'sender-a', interval '30 s')",
                                     (guid,))
                    if lease == "paused":
                        conn.execute("UPDATE guid_leases SET paused_reason = 'test', paused_by = 't',"
                                     " paused_at = now() WHERE guid = %s", (guid,))
                    if state is not None:
                        conn.execute("SELECT * FROM pacer_set_guid_state(%s, %s, 'callback', NULL, now())",
                                     (guid, state))
                    if lease == "paused" or state not in (None, "online"):
                        expected_held.append(guid)
                    by_state[state or "online"].append(guid)

    async def pages(api: Any, query: str) -> list[str]:
        seen: list[str] = []
        after = ""
        while True:
            body = (await api.get(f"/guids?{query}&limit=4{after}", "operator")).json()
            seen += [g["guid"] for g in body["guids"]]
            if body["next_after"] is None:
                return seen
            after = f"&after={body['next_after']}"

    async def go() -> tuple[list[str], dict[str, list[str]]]:
        async with control_api(database_url) as api:
            return (await pages(api, "paused=true"),
                    {s: await pages(api, f"state={s}") for s in by_state})

    held, listed = asyncio.run(go())
    assert held == sorted(expected_held) and len(held) == 24
    assert listed == {s: sorted(g) for s, g in by_state.items()}
