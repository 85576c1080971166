"""The console's server side and the use cases it added, on a real Postgres: parts guarded
like the API, in-doubt sends resolved through the ledger, approvals, bulk cancel."""

from __future__ import annotations

import asyncio
import html
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pacer_common.db.pool import open_pool
from pacer_common.domain.events import ItemEvent
from pacer_control import core
from pacer_control.domain import filters
from pacer_reconciler.adapters.postgres import PostgresLog
from tests.integration.control_support import audit, control_api, move, rows
from tests.integration.helpers import away_from_midnight, eventually, seed_job, waiting_for_locks


def unverified(url: str, item: str, key: str) -> None:
    """``item`` (pending) in doubt for good, its key reserved in the ledger, as a lost answer leaves it."""
    with psycopg.connect(url) as conn:
        for src, dst, typ in (("pending", "claimed", "ItemClaimed"), ("claimed", "submitted", "ItemSubmitted"),
                              ("submitted", "recovery_pending", "ItemInDoubt"),
                              ("recovery_pending", "unverified", "ItemUnverified")):
            conn.execute("SELECT pacer_transition(ARRAY[%s::uuid], ARRAY[%s]::item_status[], %s::item_status, %s,"
                         " p_lease_owner => 'w1', p_lease_ttl => interval '30 s', p_clear_lease => %s)",
                         (item, src, dst, typ, dst != "claimed"))
        conn.execute("INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)"
                     " SELECT idem_key, item_id, guid, to_id, 'reserved' FROM items WHERE item_id = %s", (item,))
    assert key


def text_on_the_job(url: str, job: str) -> str:
    """The job's items' one text stored on the job instead, as the planner stores a text every
    target shares (``jobs.item_content``, the items' content NULL); returns the text."""
    with psycopg.connect(url) as conn:
        (text,) = conn.execute("UPDATE jobs j SET item_content = (SELECT min(content) FROM items i"
                               " WHERE i.job_id = j.job_id) WHERE job_id = %s RETURNING item_content", (job,)).fetchone()
        conn.execute("UPDATE items SET content = NULL WHERE job_id = %s", (job,))
    return str(text)


def test_in_doubt_sends_are_listed_and_resolved_through_the_ledger_by_a_tech_admin(database_url: str) -> None:
    job, _, (sent, lost, other) = seed_job(database_url, {"g1": 3})
    text = text_on_the_job(database_url, job)
    for item in (sent, lost):
        unverified(database_url, item, "k")

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.get("/in-doubt", "operator")
            assert r.status_code == 200
            listed = {i["item_id"]: i for i in r.json()["items"]}
            assert set(listed) == {sent, lost}
            assert listed[sent]["ledger_state"] == "reserved"
            assert (listed[sent]["content_chars"], listed[sent]["content_start"]) == (len(text), text)
            assert [e["type"] for e in listed[sent]["events"]] == [
                "ItemClaimed", "ItemSubmitted", "ItemInDoubt", "ItemUnverified"]

            body = {"delivered": True, "reason": "recipient confirmed"}
            r = await api.post(f"/items/{sent}/resolve", "operator", json=body)
            assert r.status_code == 403 and "may not resolve in-doubt sends" in r.json()["detail"]
            r = await api.post(f"/items/{sent}/resolve", "tech_admin", json={"delivered": True})
            assert r.status_code == 422  # a reason is required
            r = await api.post(f"/items/{sent}/resolve", "tech_admin", json=body)
            assert (r.status_code, r.json()["status"]) == (200, "confirmed"), r.text
            r = await api.post(f"/items/{lost}/resolve", "tech_admin",
                               json={"delivered": False, "reason": "not in the recipient's chat"})
            assert (r.status_code, r.json()["status"]) == (200, "pending"), r.text
            r = await api.post(f"/items/{other}/resolve", "tech_admin", json=body)
            assert r.status_code == 409 and "not unverified" in r.json()["detail"]
            r = await api.post(f"/items/{sent}/resolve", "tech_admin", json=body)
            assert r.status_code == 409  # decided once
            assert (await api.get("/in-doubt", "operator")).json()["items"] == []

    asyncio.run(go())
    status = {r["item_id"]: (r["status"], r["state"]) for r in rows(
        database_url, "SELECT i.item_id::text, i.status::text, l.state FROM items i"
                      " LEFT JOIN send_ledger l ON l.item_id = i.item_id WHERE i.item_id = ANY(%s::uuid[])",
        [sent, lost])}
    # Delivered: confirmed and its key stays used; not delivered: pending again, key free to send.
    assert status == {sent: ("confirmed", "sent"), lost: ("pending", None)}
    assert [(e["type"], e["to_status"]) for e in rows(
        database_url, "SELECT type, to_status::text FROM item_events WHERE item_id = %s ORDER BY version", lost)][-1] \
        == ("ItemResolvedNotDelivered", "pending")
    assert [(a["actor"], a["action"], a["reason"], a["after"]["delivered"]) for a in audit(database_url, sent)] == [
        ("token:tech_admin", "resolve", "recipient confirmed", True)]
    assert [(a["action"], a["after"]["status"]) for a in audit(database_url, lost)] == [("resolve", "pending")]


def test_approve_starts_a_waiting_job_and_reject_cancels_one_without_a_send(database_url: str) -> None:
    good, _, _ = seed_job(database_url, {"g1": 2})
    bad, _, bad_items = seed_job(database_url, {"g2": 2})
    text_on_the_job(database_url, good)  # its samples read the text from the job
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET status = 'awaiting_approval', paused_reason = 'awaiting approval: test'"
                     " WHERE job_id = ANY(%s::uuid[])", ([good, bad],))
        # g2 may send one campaign message a day (its batch share of a cap of 2, reserve 0.2):
        # its two items take a day, whatever its interval.
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('g2', %s, 'test')",
                     (Jsonb({"per_day": 2, "min_interval_s": 0.5}),))

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.get("/approvals", "operator")
            assert r.status_code == 200
            waiting = {j["job_id"]: j for j in r.json()["jobs"]}
            assert set(waiting) == {good, bad}
            assert waiting[good]["projection"]["items"] == 2 and waiting[good]["samples"][0]["content"] == "hi"
            (capped,) = waiting[bad]["projection"]["guids"]
            assert (capped["caps"], capped["seconds"], waiting[bad]["projection"]["seconds"]) == ("1/day", 86_400, 86_400)
            assert (await api.post(f"/jobs/{good}/resume", "operator")).status_code == 409  # no way around it
            assert (await api.post(f"/jobs/{good}/approve", "tech_admin")).status_code == 403
            r = await api.post(f"/jobs/{good}/approve", "admin", json={"reason": "checked"})
            assert (r.status_code, r.json()["status"]) == (200, "running"), r.text
            assert (await api.post(f"/jobs/{good}/approve", "admin")).status_code == 409
            assert (await api.post(f"/jobs/{bad}/reject", "admin", json={})).status_code == 422  # reason required
            r = await api.post(f"/jobs/{bad}/reject", "admin", json={"reason": "wrong audience"})
            assert (r.status_code, r.json()["status"]) == (200, "cancelled"), r.text

    asyncio.run(go())
    assert {r["status"] for r in rows(database_url, "SELECT status::text FROM items WHERE job_id = %s", bad)} == {
        "abandoned"}
    assert len(bad_items) == 2
    assert rows(database_url, "SELECT count(*) AS n FROM approved_contents WHERE job_id = %s", good) == [{"n": 1}]
    assert [(a["action"], a["reason"]) for a in audit(database_url, good)] == [("approve", "checked")]
    assert [a["action"] for a in audit(database_url, bad)] == ["reject", "cancel"]


def test_approvals_show_the_jobs_that_waited_longest_and_how_many_wait(database_url: str) -> None:
    start = datetime.now(UTC) - timedelta(hours=2)
    jobs = [seed_job(database_url, {"g1": 1}, created_at=start + timedelta(minutes=n))[0] for n in range(53)]
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET status = 'awaiting_approval', paused_reason = 'awaiting approval: test'"
                     " WHERE job_id = ANY(%s::uuid[])", (jobs,))

    async def go() -> None:
        async with control_api(database_url) as api:
            page = (await api.get("/approvals", "operator")).json()
            assert page["waiting"] == 53
            assert [j["job_id"] for j in page["jobs"]] == jobs[:50], "the oldest fifty, oldest first"
            assert page["jobs"][0]["counts"] == {"pending": 1}
            html = (await api.client.get("http://control/console/part/approvals", headers=api.auth("admin"))).text
            assert "53 jobs wait for approval; the oldest 50 are shown" in html
            assert re.findall(r'<article class="doubt approval" data-job="([^"]+)"', html) == jobs[:50]

    asyncio.run(go())


def test_bulk_cancel_by_guid_cancels_only_items_not_taken_yet_with_one_audit_record(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 3, "g2": 2})
    g1 = [i["item_id"] for i in rows(database_url, "SELECT item_id::text FROM items WHERE guid = 'g1' ORDER BY 1")]
    move(database_url, g1[:1], "claimed")

    async def go() -> dict[str, Any]:
        async with control_api(database_url) as api:
            r = await api.post(f"/jobs/{job}/cancel-items", "operator", json={"guid": "g1", "reason": "wrong list"})
            assert r.status_code == 200, r.text
            return r.json()["totals"]

    assert asyncio.run(go())["cancelled"] == 2
    by_guid = rows(database_url, "SELECT guid, status::text, count(*)::int AS n FROM items GROUP BY 1, 2 ORDER BY 1, 2")
    assert [(r["guid"], r["status"], r["n"]) for r in by_guid] == [
        ("g1", "abandoned", 2), ("g1", "claimed", 1), ("g2", "pending", 2)]
    (entry,) = [a for a in audit(database_url, job) if a["action"] == "cancel_items"]
    assert (entry["actor"], entry["reason"], entry["after"]["cancelled"]) == ("token:operator", "wrong list", 2)
    assert len(items) == 5


def test_bulk_cancel_and_retry_over_the_limit_go_in_parts(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the limit (3 here, 10,000 in service) a bulk action is refused unless taken in
    parts: ``at_most`` a call, each part after the last one's ``next_after``. Parts go by item
    id, so items a part could not act on, which still match, are passed over, not taken again."""
    monkeypatch.setattr(filters, "MAX_RETRY", 3)
    monkeypatch.setattr(core, "MAX_RETRY", 3)
    job, _, items = seed_job(database_url, {"g1": 5, "g2": 4})
    g2 = [i["item_id"] for i in rows(database_url, "SELECT item_id::text FROM items WHERE guid = 'g2' ORDER BY 1")]
    move(database_url, g2, "failed", "needs_human")
    refused_job, _, refused_items = seed_job(database_url, {"g3": 5})
    move(database_url, refused_items, "failed", "needs_human")
    with psycopg.connect(database_url) as conn:  # a terminated job's items are never retried: each is refused
        conn.execute("UPDATE jobs SET status = 'terminated' WHERE job_id = %s", (refused_job,))

    async def parts(api: Any, path: str, body: dict[str, Any], at: list[str], counted: str) -> list[int]:
        taken, after = [], None
        for _ in range(5):
            part = {**body, "after": after} if after else body
            r = await api.post(path, "operator", json={"filter": {**part}} if at == ["filter"] else part)
            assert r.status_code == 200, r.text
            out = r.json()
            taken.append(out["totals"][counted])
            assert out["more"] == (out["next_after"] is not None)
            if not out["more"]:
                return taken
            after = out["next_after"]
        raise AssertionError(f"still more after five parts: {taken}")

    async def go() -> dict[str, list[int]]:
        async with control_api(database_url) as api:
            for path, body in ((f"/jobs/{job}/cancel-items", {"guid": "g1"}),
                               (f"/jobs/{job}/retry", {"filter": {"status": "failed"}})):
                r = await api.post(path, "operator", json=body)
                assert r.status_code == 422 and "more than 3 items" in r.text and "next_after" in r.text, r.text
            r = await api.post(f"/jobs/{job}/cancel-items", "operator", json={"guid": "g1", "at_most": 0})
            assert r.status_code == 422 and "at_most" in r.text, r.text
            r = await api.post(f"/jobs/{job}/cancel-items", "operator", json={"guid": "g1", "after": g2[0]})
            assert r.status_code == 422 and "'after' goes with 'at_most'" in r.text, r.text
            return {
                "cancel": await parts(api, f"/jobs/{job}/cancel-items", {"guid": "g1", "at_most": 2}, [], "cancelled"),
                "retry": await parts(api, f"/jobs/{job}/retry", {"status": "failed", "at_most": 3}, ["filter"], "created"),
                "refused": await parts(api, f"/jobs/{refused_job}/retry", {"status": "failed", "at_most": 2}, ["filter"],
                                       "refused"),
            }

    assert asyncio.run(go()) == {"cancel": [2, 2, 1], "retry": [3, 1], "refused": [2, 2, 1]}
    by_guid = rows(database_url, "SELECT guid, status::text, count(*)::int AS n FROM items"
                                 " WHERE compensates IS NULL GROUP BY 1, 2 ORDER BY 1, 2")
    assert [(r["guid"], r["status"], r["n"]) for r in by_guid] == [
        ("g1", "abandoned", 5), ("g2", "failed", 4), ("g3", "failed", 5)]
    assert rows(database_url, "SELECT count(*)::int AS n FROM items WHERE compensates IS NOT NULL")[0]["n"] == 4
    log = [(a["action"], a["before"].get("at_most"), a["before"].get("after") is not None,
            a["after"].get("next_after") is not None) for a in audit(database_url, job)]
    assert log == [("cancel_items", 2, False, True), ("cancel_items", 2, True, True), ("cancel_items", 2, True, False),
                   ("retry", 3, False, True), ("retry", 3, True, False)]
    assert len(items) == 9


def test_console_pages_hold_no_data_and_parts_are_guarded_like_the_api(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 2})
    move(database_url, items[:1], "claimed")

    async def go() -> None:
        async with control_api(database_url) as api:
            c = api.client
            page = await c.get("http://control/console/jobs")
            assert page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
            assert job not in page.text and "set-cookie" not in page.headers
            assert (await c.get("http://control/console/part/jobs")).status_code == 401
            r = await c.get("http://control/console/part/jobs", headers=api.auth("operator"))
            assert r.status_code == 200 and job in r.text
            r = await c.get("http://control/console/part/locks", headers=api.auth("operator"))
            assert r.status_code == 403
            r = await c.get("http://control/console/part/locks", headers=api.auth("tech_admin"))
            assert r.status_code == 200 and f'<code class="id">{items[0]}</code>' in r.text  # the whole id
            r = await c.post(f"http://control/console/part/jobs/{job}/terminate", headers=api.auth("operator"))
            assert r.status_code == 403
            r = await c.post(f"http://control/console/part/jobs/{job}/pause", headers=api.auth("operator"),
                             content="reason=from+the+console")
            assert r.status_code == 200 and "running → paused" in r.text
            r = await c.get(f"http://control/console/part/jobs/{job}", headers=api.auth("operator"))
            assert "Cancel does not undo messages already sent" in r.text
            assert "act-terminate" not in r.text and "act-resume" in r.text and "act-pause" not in r.text
            r = await c.get(f"http://control/console/part/jobs/{job}", headers=api.auth("tech_admin"))
            assert "act-terminate" in r.text

            # The guids page shows a guid's lifecycle state, and its history on demand.
            with psycopg.connect(database_url) as conn:
                conn.execute("SELECT * FROM pacer_set_guid_state('g1', 'kicked', 'callback', 'logged out', now())")
            r = await c.get("http://control/console/part/guids", headers=api.auth("operator"))
            assert r.status_code == 200 and 'guid-state">kicked</span>' in r.text and "logged out" in r.text
            assert "Resume" in r.text  # a held guid offers the resume
            r = await c.get("http://control/console/part/guids/g1/history", headers=api.auth("operator"))
            assert r.status_code == 200 and "<b>kicked</b>" in r.text and "callback" in r.text
            assert re.search(r"<small>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d</small>", r.text), "its event time, as every time"

            # Swagger UI and the console's script come from Pacer itself, never from elsewhere.
            docs = await c.get("http://control/api/v1/docs")
            assets = re.findall(r'(?:src|href)="([^"]+)"', docs.text + page.text)
            assert assets and all(a.startswith("/") for a in assets), assets
            for a in assets:
                assert (await c.get(f"http://control{a}")).status_code == 200, a

    asyncio.run(go())
    (entry,) = audit(database_url, job)
    assert (entry["actor"], entry["action"], entry["reason"]) == ("token:operator", "pause", "from the console")


def test_the_guids_page_pages_through_every_guid_finds_one_and_lists_the_busiest(database_url: str) -> None:
    names = [f"p{n:03d}" for n in range(205)]  # more than one page of 200
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO guid_leases (guid) SELECT unnest(%s::text[])", (names,))
    seed_job(database_url, {"p007": 5, "p150": 2})
    # p150's oldest item has waited longest; p007 has the most queued. Before any sender has
    # met their items: p020's only job is paused, p021's shard is paused; p022's item is due
    # tomorrow; p023 is paused by an operator, p024 was kicked out of its account (more queued
    # than any other: the busiest list would show them first).
    paused_job, _, _ = seed_job(database_url, {"p020": 1})
    _, p021_shard, _ = seed_job(database_url, {"p021": 1})
    seed_job(database_url, {"p022": 1, "p023": 9, "p024": 9, "p151": 1, "p152": 1, "p153": 1})
    hourly_job, _, _ = seed_job(database_url, {"p154": 1})  # its job sends once an hour per guid
    # p151, p152 and p153 have waited as long as p150, but p151 is inside its quiet hours (an
    # hour either side of now), p152 sends once every two hours and p153 has used its day's
    # batch share (8 of 10), p154's only job sends once an hour per guid: none is stalled.
    # p153's day is UTC's and the API reads its own clock: that day must outlast the test.
    away_from_midnight()
    quiet = f"{(datetime.now(UTC) - timedelta(hours=1)):%H:%M}-{(datetime.now(UTC) + timedelta(hours=1)):%H:%M}"
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE items SET created_at = now() - interval '1 hour'"
                     " WHERE guid IN ('p150', 'p151', 'p152', 'p153', 'p154')")
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 't')",
                     (f"job:{hourly_job}", Jsonb({"min_interval_s": 7200})))
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('p151', %s, 't'), ('p152', %s, 't'),"
                     " ('p153', %s, 't')", (Jsonb({"quiet_hours": quiet, "timezone": "UTC"}),
                                            Jsonb({"min_interval_s": 7200}), Jsonb({"per_day": 10})))
        conn.execute("UPDATE guid_leases SET windows = jsonb_build_object('day', jsonb_build_array("
                     "floor(extract(epoch FROM now()) / 86400)::bigint, 8)) WHERE guid = 'p153'")
        conn.execute("UPDATE items SET not_before = now() + interval '1 day' WHERE guid = 'p022'")
        conn.execute("SELECT * FROM pacer_job_action(%s::uuid, 'pause', 'test', 'r')", (paused_job,))
        conn.execute("UPDATE shards SET status = 'running' WHERE shard_id = %s", (p021_shard["p021"],))
        conn.execute("SELECT * FROM pacer_shard_action(%s, 'pause', 'test', 'r')", (p021_shard["p021"],))
        conn.execute("SELECT pacer_hold_guid('p023', 'too much queued', 'test')")
        conn.execute("INSERT INTO guid_states (guid, state, source, reason, event_ts)"
                     " VALUES ('p024', 'kicked', 'callback', 'logged in elsewhere', now())")
        assert conn.execute("SELECT count(*) FROM items WHERE held").fetchone() == (0,)

    def listed(html: str, table: str) -> list[str]:
        part = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
        return re.findall(r'<tr data-guid="([^"]+)"', part)

    async def go() -> None:
        async with control_api(database_url) as api:
            c, auth = api.client, api.auth("operator")
            base = "http://control/console/part/guids"
            first = await c.get(base, headers=auth)
            assert first.status_code == 200
            assert listed(first.text, "guids") == names[:200]
            # a guid with items ready is sending, or stalled when one has been ready over 2 minutes
            # without a send (p150's for an hour); waiting when none of its queued items is ready
            # (its job or shard paused, or due later); idle with nothing queued
            health = dict(re.findall(r'<tr data-guid="([^"]+)">(?:(?!<tr ).)*?<span class="status s-\w+"[^>]*>(\w+)</span>',
                                     first.text, re.S))  # within one row: a held guid has no activity
            expected = {"p007": "sending", "p150": "stalled", "p020": "waiting", "p021": "waiting",
                        "p022": "waiting", "p008": "idle", "p151": "quiet", "p152": "sending", "p153": "capped",
                        "p154": "sending"}
            assert {g: health[g] for g in expected} == expected
            assert health["p023"] == "paused" and "p024" not in health, "a held guid shows why, not an activity"
            assert 'guid-state">kicked</span>' in first.text
            listed_api = (await api.get("/guids?limit=200", "operator")).json()["guids"]
            assert {g["guid"]: g["activity"] for g in listed_api if g["guid"] in expected} == expected
            by_guid = {g["guid"]: g for g in listed_api}
            # a held guid shows why it is held, not what it is doing
            assert [(by_guid[g]["held"], by_guid[g]["activity"]) for g in ("p023", "p024")] == [(True, None)] * 2
            assert [(by_guid[g]["queued"], by_guid[g]["ready"]) for g in ("p007", "p020", "p022")] == [
                (5, 5), (1, 0), (1, 0)]
            assert '1 <small class="muted ready">0 ready</small>' in first.text  # p020's row
            ends = datetime.fromisoformat(by_guid["p151"]["quiet_until"]) - datetime.now(UTC)
            assert timedelta(minutes=58) < ends <= timedelta(hours=1), by_guid["p151"]
            assert re.search(r'<tr data-guid="p151">(?:(?!<tr ).)*?quiet</span>\s*<small>ends in (59|60) min</small>',
                             first.text, re.S)
            assert by_guid["p150"]["quiet_until"] is None
            midnight = datetime.combine(datetime.now(UTC).date() + timedelta(days=1), datetime.min.time(), UTC)
            assert datetime.fromisoformat(by_guid["p153"]["capped_until"]) == midnight
            assert by_guid["p150"]["capped_until"] is None
            assert re.search(r'<tr data-guid="p153">(?:(?!<tr ).)*?capped</span>\s*<small>ends in ', first.text, re.S)
            # one guid's view says the same, from its backlog: p020's paused item counts held
            for g in ("p007", "p150", "p020", "p022", "p151", "p152", "p153", "p154"):
                one = (await api.get(f"/guids/{g}", "operator")).json()
                assert one["activity"] == health[g], (g, one)
            # every guid's limits (``*``) count under a guid's own: p150 at one send in two hours
            with psycopg.connect(database_url) as conn:
                conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES ('*', %s, 't')",
                             (Jsonb({"min_interval_s": 7200}),))
            assert (await api.get("/guids/p150", "operator")).json()["activity"] == "sending"
            assert {g["guid"]: g["activity"] for g in (await api.get("/guids?limit=200", "operator")).json()["guids"]
                    if g["guid"] in ("p150", "p151")} == {"p150": "sending", "p151": "quiet"}
            with psycopg.connect(database_url) as conn:
                conn.execute("DELETE FROM guid_limits WHERE guid = '*'")
            # and under those, the defaults of the sender holding the guid: quiet hours set only in
            # its environment (PACER_SENDER_QUIET_HOURS) hold p150 as well
            with psycopg.connect(database_url) as conn:
                conn.execute("INSERT INTO sender_limits (owner, limits) VALUES ('quiet-sender', %s)",
                             (Jsonb({"quiet_hours": quiet, "timezone": "UTC"}),))
                conn.execute("UPDATE guid_leases SET owner = 'quiet-sender' WHERE guid = 'p150'")
            held = (await api.get("/guids/p150", "operator")).json()
            assert (held["activity"], "sender_limits" in held) == ("quiet", False)
            assert {g["guid"]: g["activity"] for g in (await api.get("/guids?limit=200", "operator")).json()["guids"]
                    if g["guid"] == "p150"} == {"p150": "quiet"}
            with psycopg.connect(database_url) as conn:
                conn.execute("UPDATE guid_leases SET owner = NULL WHERE guid = 'p150'")
            assert (await api.get("/guids/p020", "operator")).json()["backlog"]["by_lane"] == {"batch": {"held": 1}}
            # the next page starts after the last one shown
            nxt = re.search(r'id="guids-next" hx-get="([^"]+)"', first.text)
            assert nxt, "a full page offers the next one"
            second = await c.get(f"http://control{nxt.group(1).replace('&amp;', '&')}", headers=auth)
            assert listed(second.text, "guids") == names[200:]
            assert 'id="guids-next"' not in second.text
            # from a guid on, that guid included; a name between guids starts at the next one
            found = await c.get(base, params={"find": "p150"}, headers=auth)
            assert listed(found.text, "guids")[:2] == ["p150", "p151"]
            assert listed((await c.get(base, params={"find": "p1"}, headers=auth)).text, "guids")[0] == "p100"
            assert "No guid from zz on." in (await c.get(base, params={"find": "zz"}, headers=auth)).text
            # the busiest: most queued first, or longest waiting first; held work left out (p020's
            # paused job, p021's paused shard, p023 paused, p024 kicked), scheduled work counted
            # (p022's, with no wait yet); ties by name
            by_backlog = await c.get(base, params={"sort": "backlog"}, headers=auth)
            assert listed(by_backlog.text, "backlogs") == ["p007", "p150", "p022", "p151", "p152", "p153", "p154"]
            by_wait = await c.get(base, params={"sort": "wait"}, headers=auth)
            assert listed(by_wait.text, "backlogs") == ["p150", "p151", "p152", "p153", "p154", "p007", "p022"]
            assert (await c.get(base, params={"sort": "size"}, headers=auth)).status_code == 422

    asyncio.run(go())


def test_paging_keeps_a_filter_whose_value_a_url_would_split(database_url: str) -> None:
    creator = "ops:a&b #1+"
    jobs = [seed_job(database_url, {"g1": 1})[0] for _ in range(51)]  # one more than a page
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET created_by = %s WHERE job_id = ANY(%s::uuid[])", (creator, jobs))

    async def go() -> None:
        async with control_api(database_url) as api:
            c, auth = api.client, api.auth("operator")
            first = await c.get("http://control/console/part/jobs", params={"created_by": creator}, headers=auth)
            shown = re.findall(r'<tr data-job="([^"]+)"', first.text)
            assert len(shown) == 50
            older = re.search(r'hx-get="(/console/part/jobs\?[^"]+)"', first.text)
            assert older, "a full page offers the older jobs"
            rest = await c.get(f"http://control{html.unescape(older.group(1))}", headers=auth)
            assert re.findall(r'<tr data-job="([^"]+)"', rest.text) == sorted(set(jobs) - set(shown))

    asyncio.run(go())


def test_a_guid_that_a_url_would_split_is_acted_on_as_itself(database_url: str) -> None:
    # A guid comes from a job request: anything but NUL. Put unescaped into a button's URL, this
    # one would make the browser post to /console/part/jobs/<job>/cancel (another tenant's job).
    victim, _, _ = seed_job(database_url, {"g-victim": 1})
    guid = f"../../jobs/{victim}/cancel?x=#%2F"
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO guid_leases (guid, owner, lease_until) VALUES (%s, 'sender-1', now() + interval '1 minute')",
                     (guid,))
    seed_job(database_url, {guid: 1})

    async def go() -> None:
        async with control_api(database_url) as api:
            c, auth = api.client, api.auth("admin")
            page = await c.get("http://control/console/part/guids", params={"find": guid}, headers=auth)
            posts = [html.unescape(u) for u in re.findall(r'hx-post="([^"]+)"', page.text)]
            locks = await c.get("http://control/console/part/locks", headers=auth)
            posts += [html.unescape(u) for u in re.findall(r'hx-post="(/console/part/guids/[^"]+)"', locks.text)]
            segment = quote(guid, safe="")
            assert f"/console/part/guids/{segment}/pause" in posts, posts
            assert f"/console/part/guids/{segment}/release-lock" in posts, posts
            assert all("/jobs/" not in u for u in posts), "a guid's button posts to the guid, whatever its name"
            paused = await c.post(f"http://control/console/part/guids/{segment}/pause", content="reason=check",
                                  headers=auth | {"Content-Type": "application/x-www-form-urlencoded"})
            assert paused.status_code == 200 and "paused" in paused.text, paused.text
            one = await api.get(f"/guids/{segment}", role="operator")
            assert one.status_code == 200 and one.json()["guid"] == guid and one.json()["paused"], one.text
            history = await api.get(f"/guids/{segment}/history", role="operator")
            assert history.status_code == 200 and history.json()["guid"] == guid
            resumed = await api.post(f"/guids/{segment}/resume", role="operator", json={"reason": "checked"})
            assert resumed.status_code == 200 and resumed.json()["changed"], resumed.text

    asyncio.run(go())
    (job,) = rows(database_url, "SELECT status FROM jobs WHERE job_id = %s", victim)
    assert job["status"] != "cancelled"


async def apply_the_log(url: str) -> int:
    """Apply every event in the log to the projection, as the reconciler does (one segment of
    one, its own cursor); returns the events applied."""
    pool = await open_pool(url, min_size=1, max_size=1)
    try:
        log = PostgresLog(pool, "test-console", timedelta(seconds=60))
        start = await log.position()
        read = await log.read(start, 1_000)
        events = [e for _, e in read if isinstance(e, ItemEvent)]
        assert read and len(events) == len(read), read
        await log.commit_batch(events, start, read[-1][0])
        return len(events)
    finally:
        await pool.close()


def test_the_job_page_lists_items_by_whole_id_and_says_when_its_categories_are_ahead_of_the_counts(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 3})
    move(database_url, items[:2], "failed", "bad_params")  # in the items; not yet in the projection

    async def go() -> None:
        async with control_api(database_url) as api:
            async def part(name: str) -> str:
                r = await api.client.get(f"http://control/console/part/jobs/{job}/{name}",
                                         headers=api.auth("operator"))
                assert r.status_code == 200, r.text
                return r.text

            behind = await part("failures")
            assert 'data-category="bad_params"' in behind and 'data-count="failed" class="">0<' in await part("progress")
            assert 'id="counts-catching-up"' in behind and "failed 2 here, 0 in the job's counts read with them" in html.unescape(behind)
            # Items not delivered by their whole id: a job's items share its first 13 characters.
            assert all(f'<code class="id">{i}</code>' in behind for i in items[:2]) and items[2] not in behind

            assert await apply_the_log(database_url) == 6  # the reconciler's projection catches up
            assert 'data-count="failed" class="bad">2<' in await part("progress")
            assert 'id="counts-catching-up"' not in await part("failures")

    asyncio.run(go())


def test_a_job_whose_counts_take_long_to_read_has_them_kept_and_says_when_they_were_read(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 3})
    move(database_url, items[:2], "failed", "bad_params")  # in the items; not yet in the projection

    async def go() -> None:
        # Every read of the counts taken as slow (no floor), kept 99,999 times as long as it took.
        async with control_api(database_url, counts_fresh_s=0.0, counts_share=1e-5) as api:
            async def progress() -> str:
                r = await api.client.get(f"http://control/console/part/jobs/{job}/progress",
                                         headers=api.auth("operator"))
                assert r.status_code == 200, r.text
                return r.text

            first = (await api.get(f"/jobs/{job}?shards_limit=0", "operator")).json()
            assert first["counts"] == {"pending": 3}
            assert await apply_the_log(database_url) == 6  # the projection moves on
            with psycopg.connect(database_url) as conn:  # and the job's row, by another process
                conn.execute("UPDATE jobs SET paused_reason = 'by hand' WHERE job_id = %s", (job,))
            kept = (await api.get(f"/jobs/{job}?shards_limit=0", "operator")).json()
            # The counts as they were read, and when; the job's own row read afresh.
            assert (kept["counts"], kept["counts_read_at"], kept["paused_reason"]) == (
                first["counts"], first["counts_read_at"], "by hand")
            # The page, shared with the API's callers, says when once they are a second old.
            shown = await eventually(lambda: _when(progress(), 'id="counts-kept"'), 10, "the counts' age shown")
            read_at = datetime.fromisoformat(first["counts_read_at"]).strftime("%Y-%m-%d %H:%M:%S")
            assert f"counts as of {read_at}" in shown and 'data-count="failed" class="">0<' in shown
            # An operator's action on the job: its counts are read afresh.
            assert (await api.post(f"/jobs/{job}/pause", "operator")).status_code == 200
            fresh = (await api.get(f"/jobs/{job}?shards_limit=0", "operator")).json()
            assert fresh["counts"] == {"failed": 2, "pending": 1}
            assert fresh["counts_read_at"] > first["counts_read_at"]

    asyncio.run(go())


async def _when(text: Any, needle: str) -> str | None:
    """``text`` (awaited) if it holds ``needle``."""
    got = await text
    return got if needle in got else None


def test_the_job_page_lists_the_shards_to_look_at_first_and_how_many_there_are(database_url: str) -> None:
    job, shards, _ = seed_job(database_url, {f"g{n:02d}": 2 for n in range(60)})
    few, _, _ = seed_job(database_url, {"h1": 1, "h2": 1})
    with psycopg.connect(database_url) as conn:
        # g00 quiet for 60 minutes, g01 for 59, … g59 for 1; g00–g04 done; g30 paused.
        conn.execute("UPDATE shards SET status = 'running', last_progress_at = now() - make_interval("
                     "mins => 60 - substr(guid, 2)::int) WHERE job_id = %s", (job,))
        conn.execute("UPDATE shards SET status = 'completed' WHERE job_id = %s AND guid < 'g05'", (job,))
        conn.execute("UPDATE shards SET status = 'paused', paused_reason = 'vip' WHERE shard_id = %s",
                     (shards["g30"],))
        # g06's guid paused, g08's out of its account: quiet for that reason, after the others.
        conn.execute("INSERT INTO guid_leases (guid, paused_reason) VALUES ('g06', 'operator')")
        conn.execute("INSERT INTO guid_states (guid, state, source, reason, event_ts)"
                     " VALUES ('g08', 'offline', 'callback', 'logged out', now())")
    guid_of = {str(sid): guid for guid, sid in shards.items()}

    async def go() -> None:
        async with control_api(database_url) as api:
            async def part(of: str) -> str:
                r = await api.client.get(f"http://control/console/part/jobs/{of}/shards", headers=api.auth("operator"))
                assert r.status_code == 200, r.text
                return r.text

            page = await part(job)
            listed = [guid_of[sid] for sid in re.findall(r'data-shard="(\d+)"', page)]
            # The paused shard, then those with work left quiet longest first; those of the held
            # guids, the done ones and the 50th-and-after quietest are not listed.
            assert listed == ["g30", "g05", "g07"] + [f"g{n:02d}" for n in (*range(9, 30), *range(31, 57))]
            totals = html.unescape(re.sub(r"\s+", " ", page.split('id="shard-totals">')[1].split("</small>")[0]))
            assert totals == "60: completed 5 · paused 1 · running 54"
            assert 'id="shards-shown"' in page and "The 50 to look at first" in page
            small = await part(few)
            assert small.count("data-shard=") == 2 and 'id="shards-shown"' not in small

    asyncio.run(go())


def test_a_shard_whose_account_is_out_of_service_or_paused_says_so_not_running(database_url: str) -> None:
    """A running job's shards: k1's account kicked, p1's paused by an operator, ok1's online.
    The first two say what holds them, in the console and the API; the third is running."""
    job, shards, _ = seed_job(database_url, {"k1": 2, "p1": 2, "ok1": 2})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE shards SET status = 'running' WHERE job_id = %s", (job,))
        conn.execute("INSERT INTO guid_leases (guid, paused_reason) VALUES ('p1', 'number under review')")
        conn.execute("INSERT INTO guid_states (guid, state, source, reason, event_ts)"
                     " VALUES ('k1', 'kicked', 'callback', 'logged in elsewhere', now()),"
                     " ('ok1', 'online', 'callback', 'back', now())")

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.client.get(f"http://control/console/part/jobs/{job}/shards", headers=api.auth("operator"))
            assert r.status_code == 200, r.text
            rows = {guid: html.unescape(re.sub(r"<[^>]+>|\s+", " ", r.text.split(f'data-shard="{sid}">')[1]
                                                .split("</tr>")[0])).split()
                    for guid, sid in shards.items()}
            assert " ".join(rows["k1"]).startswith("k1 held account kicked · Guids"), rows["k1"]
            assert " ".join(rows["p1"]).startswith("p1 held account paused: number under review"), rows["p1"]
            assert rows["ok1"][:2] == ["ok1", "running"], rows["ok1"]
            assert r.text.count('href="/console/guids?find=') == 2
            r = await api.get(f"/jobs/{job}", "operator")
            assert r.status_code == 200, r.text
            by_guid = {s["guid"]: (s["guid_state"], s["guid_paused_reason"]) for s in r.json()["shards"]}
            assert by_guid == {"k1": ("kicked", None), "p1": (None, "number under review"), "ok1": (None, None)}
            # The job paused: what holds its shards is the job, whatever their accounts.
            with psycopg.connect(database_url) as conn:
                conn.execute("UPDATE jobs SET status = 'paused', paused_reason = 'x' WHERE job_id = %s", (job,))
                conn.execute("UPDATE shards SET status = 'pending' WHERE guid = 'k1' AND job_id = %s", (job,))
            r = await api.client.get(f"http://control/console/part/jobs/{job}/shards", headers=api.auth("operator"))
            assert "account kicked" not in r.text and "account paused" not in r.text

    asyncio.run(go())


def test_a_job_paused_for_its_budget_says_so_and_offers_no_resume_the_database_would_refuse(database_url: str) -> None:
    job, _, _ = seed_job(database_url, {"g1": 3})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET status = 'paused', paused_reason = 'budget_exhausted', paused_by = 'system:budget',"
                     " budget_max_sends = 2, budget_used = 2 WHERE job_id = %s", (job,))

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.client.get(f"http://control/console/part/jobs/{job}", headers=api.auth("admin"))
            assert r.status_code == 200, r.text
            said = html.unescape(re.sub(r"\s+", " ", r.text.split('id="budget-used-up">')[1].split("</p>")[0]))
            assert said.startswith("Paused: its send budget is used up (2 of 2 sends begun;"), said
            assert "Confirm a larger send budget under Actions" in said
            assert "act-resume" not in r.text and "act-cancel" in r.text
            refused = await api.post(f"/jobs/{job}/resume", "admin", json={"reason": "try"})
            assert refused.status_code == 409 and "budget exhausted" in refused.text, "what the button would meet"
            with psycopg.connect(database_url) as conn:
                conn.execute("UPDATE jobs SET budget_max_sends = 5 WHERE job_id = %s", (job,))
            r = await api.client.get(f"http://control/console/part/jobs/{job}", headers=api.auth("admin"))
            assert 'id="budget-used-up"' not in r.text and "act-resume" in r.text

    asyncio.run(go())


def test_a_job_is_opened_by_its_request_id_and_an_unknown_console_address_says_what_exists(database_url: str) -> None:
    job, _, _ = seed_job(database_url, {"g1": 1})
    other, _, _ = seed_job(database_url, {"g2": 1})
    with psycopg.connect(database_url) as conn:
        (request_id,) = conn.execute("SELECT request_id FROM jobs WHERE job_id = %s", (job,)).fetchone() or ("",)

    async def go() -> None:
        async with control_api(database_url) as api:
            c = api.client
            r = await c.get(f"http://control/console/jobs/{request_id}")
            assert r.status_code == 307 and r.headers["location"] == f"/console/jobs?request_id={request_id}"
            r = await c.get(f"http://control/console/part/jobs?request_id={request_id}", headers=api.auth("operator"))
            assert re.findall(r'data-job="([^"]+)"', r.text) == [job]
            r = await c.get("http://control/console/part/jobs?request_id=no-such-request", headers=api.auth("operator"))
            assert "No job matches." in r.text and other not in r.text
            r = await api.get(f"/jobs?request_id={request_id}", "operator")
            assert [j["job_id"] for j in r.json()["jobs"]] == [job]
            r = await c.get(f"http://control/console/jobs/{job}")
            assert r.status_code == 200 and f"/console/part/jobs/{job}" in r.text
            # A request id that is a UUID (publishers use them): its job's page, from the job's part.
            with psycopg.connect(database_url) as conn:
                conn.execute("UPDATE jobs SET request_id = %s WHERE job_id = %s", (uuid_rid := str(uuid.uuid4()), other))
            r = await c.get(f"http://control/console/jobs/{uuid_rid}")
            assert r.status_code == 200 and f"/console/part/jobs/{uuid_rid}" in r.text
            r = await c.get(f"http://control/console/part/jobs/{uuid_rid}", headers=api.auth("operator"))
            assert r.status_code == 200 and r.headers["hx-redirect"] == f"/console/jobs/{other}"
            r = await c.get(f"http://control/console/part/jobs/{uuid.uuid4()}", headers=api.auth("operator"))
            assert r.status_code == 404 and r.json()["detail"].startswith("no job ")
            # The same id written otherwise (a UUID's hex) is taken as a request id; a trailing slash is dropped.
            hexed = uuid.UUID(job).hex
            assert (await c.get(f"http://control/console/jobs/{hexed}")).headers["location"] == (
                f"/console/jobs?request_id={hexed}")
            for path, to in ((f"/console/jobs/{job}/", f"/console/jobs/{job}"), ("/console/jobs/", "/console/jobs"),
                             ("/console/guids/", "/console/guids"), ("/console/", "/console")):
                r = await c.get(f"http://control{path}")
                assert (r.status_code, r.headers.get("location")) == (307, to), path
            r = await c.get("http://control/console/no-such-page")
            assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
            assert "No such page" in r.text and 'href="/console/guids"' in r.text
            r = await c.get("http://control/console/part/no-such-part", headers=api.auth("operator"))
            assert r.status_code == 404 and r.json()["detail"] == "the console has no part /console/part/no-such-part"

    asyncio.run(go())


def test_the_guids_page_says_which_limits_a_guid_goes_by(database_url: str) -> None:
    """l-own has a limit of its own, shown over every guid's ('*') of the same name, and goes by
    the other '*' limit as well; l-fleet has none and goes by every guid's; with no '*' row, a
    guid goes by the defaults."""
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO guid_leases (guid) VALUES ('l-own'), ('l-fleet')")
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES"
                     " ('l-own', '{\"min_interval_s\": 2.0}', 't'),"
                     " ('*', '{\"min_interval_s\": 5, \"per_hour\": 100}', 't')")

    async def go() -> None:
        async with control_api(database_url) as api:
            async def limits() -> dict[str, str]:
                r = await api.client.get("http://control/console/part/guids", headers=api.auth("tech_admin"))
                assert r.status_code == 200, r.text
                cells = re.findall(r'<tr data-guid="([^"]+)">.*?<td class="limits">(.*?)</td>', r.text, re.S)
                return {g: " ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split()) for g, c in cells}

            assert await limits() == {
                "l-fleet": "min_interval_s 5 every guid's ('*') per_hour 100 every guid's ('*')",
                "l-own": "min_interval_s 2.0 per_hour 100 every guid's ('*')"}
            with psycopg.connect(database_url) as conn:
                conn.execute("DELETE FROM guid_limits WHERE guid = '*'")
            assert (await limits())["l-fleet"] == "defaults"

    asyncio.run(go())


def test_a_guid_lease_past_the_first_page_is_found_by_name_and_the_page_says_how_many_there_are(
        database_url: str) -> None:
    """A fleet has more guid leases than the Locks page lists (every guid that ever held one,
    expired first, then by name): a stuck guid's lease, held and live, is found by its name,
    on the page and over the API, and the page says how many it shows of how many."""
    guids = [f"lk-{n:04d}" for n in range(520)]
    with psycopg.connect(database_url) as conn:
        conn.execute("SELECT * FROM pacer_acquire_guids(%s, 'w1', interval '1 hour')", (guids,))
    stuck = guids[-3]

    async def go() -> None:
        async with control_api(database_url) as api:
            c = api.client
            r = await c.get("http://control/console/part/locks", headers=api.auth("tech_admin"))
            assert r.status_code == 200 and f'data-guid="{stuck}"' not in r.text
            assert "500 of 520" in r.text and "find a guid to see the rest" in r.text
            r = await c.get("http://control/console/part/locks", params={"find": stuck}, headers=api.auth("tech_admin"))
            assert r.status_code == 200 and f'data-guid="{stuck}"' in r.text
            assert "3 of 520" in r.text and f"from {stuck} on" in r.text
            r = await api.get(f"/locks?guid={stuck}&limit=2", "tech_admin")
            assert r.status_code == 200, r.text
            assert [g["guid"] for g in r.json()["guid_leases"]] == guids[-3:-1]
            assert (r.json()["counts"]["guid_leases"], r.json()["counts"]["guid_leases_held"]) == (520, 520)

    asyncio.run(go())


def test_the_bulk_retry_offers_only_what_it_can_retry_and_says_why_an_item_was_not(database_url: str) -> None:
    job, _, (contested, _) = seed_job(database_url, {"g1": 2})
    move(database_url, [contested], "failed", "bad_params")
    cancelled, _, (gone,) = seed_job(database_url, {"g2": 1})
    move(database_url, [gone], "failed", "bad_params")
    with psycopg.connect(database_url) as conn:
        conn.execute("SELECT * FROM pacer_job_action(%s, 'cancel', 'test', 'withdrawn')", (cancelled,))

    async def go() -> None:
        async with control_api(database_url) as api:
            c, auth = api.client, api.auth("operator")
            page = (await c.get(f"http://control/console/part/jobs/{job}", headers=auth)).text
            select = re.search(r'<form class="row" id="bulk-retry".*?<select name="status">(.*?)</select>', page, re.S)
            assert select and re.findall(r"<option>(\w+)</option>", select.group(1)) == ["failed", "expired", "abandoned"]
            r = await c.post(f"http://control/console/part/jobs/{job}/retry", content="status=unverified", headers=auth)
            assert r.status_code == 422 and "In doubt page" in r.text
            # A retry of the item by id commits while the bulk retry waits for the item's row.
            async with await psycopg.AsyncConnection.connect(database_url) as other:
                await other.execute("SELECT * FROM pacer_retry_item(%s, 'token:other')", (contested,))
                bulk = asyncio.create_task(c.post(f"http://control/console/part/jobs/{job}/retry",
                                                  content="status=failed", headers=auth))
                await eventually(lambda: waiting_for_locks(database_url), 10, "the bulk retry waiting for the item")
                await other.commit()
                r = await bulk
            assert r.status_code == 200, r.text
            assert (f"retry: conflict 1; conflict, e.g. item {contested}: a retry of this item is already in progress"
                    in html.unescape(r.text)), r.text
            r = await c.post(f"http://control/console/part/jobs/{cancelled}/retry", content="status=failed",
                             headers=auth)
            assert f"retry: refused 1; refused, e.g. item {gone}: job {cancelled} is cancelled" in html.unescape(r.text)

    asyncio.run(go())


def test_the_approval_preview_counts_and_samples_only_what_is_left_to_send(database_url: str) -> None:
    job, _, items = seed_job(database_url, {"g1": 3, "g2": 2})  # g1's room-0..2, then g2's room-0..1
    gone, _, gone_items = seed_job(database_url, {"g3": 1})
    move(database_url, [*items[:2], *items[3:], *gone_items], "expired")  # while they waited
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET status = 'awaiting_approval', paused_reason = 'awaiting approval: test'"
                     " WHERE job_id = ANY(%s::uuid[])", ([job, gone],))

    async def go() -> None:
        async with control_api(database_url) as api:
            waiting = {j["job_id"]: j for j in (await api.get("/approvals", "operator")).json()["jobs"]}
            left = waiting[job]["projection"]
            assert (left["items"], left["expired"]) == (1, 4)
            assert [(g["guid"], g["items"]) for g in left["guids"]] == [("g1", 1)]  # g2 has nothing left
            assert [(s["guid"], s["to_id"]) for s in waiting[job]["samples"]] == [("g1", "room-2")]
            none_left = waiting[gone]["projection"]
            assert (none_left["items"], none_left["expired"], none_left["guids"]) == (0, 1, [])
            assert waiting[gone]["samples"] == []

            page = (await api.client.get("http://control/console/part/approvals", headers=api.auth("admin"))).text
            cards = dict(re.findall(r'<article class="doubt approval" data-job="([^"]+)">(.*?)</article>', page, re.S))
            assert "<b data-items>1</b> items still to send over <b>1</b> guids" in cards[job]
            assert "<b data-expired>4</b> items expired while" in cards[job]
            assert "It starts sending 1 messages now." in cards[job]
            assert "<b data-items>0</b> items still to send: approved, the job completes at once" in cards[gone]
            assert "Nothing of it is left to send: it completes at once." in cards[gone]
            r = await api.post(f"/jobs/{gone}/approve", "admin")
            assert (r.status_code, r.json()["status"]) == (200, "completed"), r.text

    asyncio.run(go())


def test_an_in_doubt_send_of_a_cancelled_job_or_past_its_expiry_is_said_not_to_be_sent_again(
        database_url: str) -> None:
    first, _, (plain, late) = seed_job(database_url, {"g1": 2})
    stopped, _, (dropped, _) = seed_job(database_url, {"g2": 2})
    newer, _, _ = seed_job(database_url, {"g1": 1})  # a newer status of the first job's business id
    for item in (plain, late, dropped):
        unverified(database_url, item, "k")
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE items SET expire_at = '2024-01-02 03:04:05.6+00' WHERE item_id = %s", (late,))
        conn.execute("SELECT * FROM pacer_job_action(%s, 'cancel', 'test', 'withdrawn')", (stopped,))

    async def go() -> dict[str, str]:
        async with control_api(database_url) as api:
            listed = {i["item_id"]: i for i in (await api.get("/in-doubt", "operator")).json()["items"]}
            assert {i: listed[i]["job_status"] for i in (plain, late, dropped)} == {
                plain: "running", late: "running", dropped: "cancelled"}
            page = (await api.client.get("http://control/console/part/in-doubt", headers=api.auth("tech_admin"))).text
            cards = dict(re.findall(r'<article class="doubt" data-item="([^"]+)">(.*?)</article>', page, re.S))
            assert "(<span data-job-status>cancelled</span>)" in cards[dropped]
            assert "it is not sent again: it is abandoned: its job is cancelled." in cards[dropped]
            assert "it is not sent again: it is expired: its expire_at 2024-01-02 03:04:05 UTC has passed" in cards[late]
            assert "not-sent" not in cards[plain] and "Not delivered: send again" in cards[plain]
            answers = {}
            for item in (plain, late, dropped):
                r = await api.post(f"/items/{item}/resolve", "tech_admin",
                                   json={"delivered": False, "reason": "not in the recipient's chat"})
                assert (r.status_code, r.json()["status"]) == (200, "pending"), r.text
                answers[item] = r.json()["message"].split("pending again, ", 1)[1]
            return answers

    answers = asyncio.run(go())
    assert answers[plain] == "it will be sent under the same key"
    # Superseded by a newer status version of its business id: abandoned at its claim.
    with psycopg.connect(database_url) as conn:
        for job, version in ((first, 1), (newer, 2)):
            conn.execute("UPDATE jobs SET coalesce_key = 'ticket:T1', coalesce_version = %s WHERE job_id = %s",
                         (version, job))
        conn.execute("UPDATE items SET status = 'unverified' WHERE item_id = %s", (plain,))

    async def superseded() -> tuple[str, str]:
        async with control_api(database_url, token_prefix="again-") as api:
            page = (await api.client.get("http://control/console/part/in-doubt", headers=api.auth("tech_admin"))).text
            card = dict(re.findall(r'<article class="doubt" data-item="([^"]+)">(.*?)</article>', page, re.S))[plain]
            r = await api.post(f"/items/{plain}/resolve", "tech_admin", json={"delivered": False, "reason": "r"})
            return card, r.json()["message"].split("pending again, ", 1)[1]

    card, answer = asyncio.run(superseded())
    assert "it is not sent again: it is abandoned: version 2 of its business id superseded it." in card
    assert answer == ("but version 2 of its business id superseded it: it is abandoned when a sender comes to claim "
                      "it, never sent")
    assert answers[late] == ("but its expire_at (2024-01-02 03:04:05 UTC) has passed: it expires unsent (at its "
                             "claim, or by the reconciler's expiry sweep)")
    assert answers[dropped] == "but its job is cancelled: it is abandoned when a sender comes to claim it, never sent"


def test_a_cancelled_job_offers_cancel_again_only_while_items_came_back_to_waiting(database_url: str) -> None:
    job, _, (in_flight, _) = seed_job(database_url, {"g1": 2})
    move(database_url, [in_flight], "claimed")

    async def go() -> None:
        async with control_api(database_url) as api:
            c, auth = api.client, api.auth("operator")

            async def page() -> str:
                r = await c.get(f"http://control/console/part/jobs/{job}", headers=auth)
                assert r.status_code == 200, r.text
                return r.text

            assert (await api.post(f"/jobs/{job}/cancel", "operator")).json()["status"] == "cancelled"
            # Before the reconciler has applied the cancel (its counts still show the abandoned
            # item pending), and after: the send in flight is not waiting.
            assert "act-cancel" not in await page()
            await apply_the_log(database_url)
            assert "act-cancel" not in await page()
            # It fails and is scheduled again: waiting under a cancelled job.
            with psycopg.connect(database_url) as conn:
                for src, dst, typ in (("claimed", "submitted", "ItemSubmitted"),
                                      ("submitted", "waiting_retry", "ItemRetryScheduled")):
                    conn.execute("SELECT pacer_transition(ARRAY[%s::uuid], ARRAY[%s]::item_status[], %s::item_status,"
                                 " %s, p_lease_ttl => interval '30 seconds', p_clear_lease => %s)",
                                 (in_flight, src, dst, typ, dst == "waiting_retry"))
            again = await page()
            assert "act-cancel" in again
            assert "Cancel again: the job is cancelled, but 1 of its items came back to pending or waiting_retry" in again
            r = await c.post(f"http://control/console/part/jobs/{job}/cancel", headers=auth)
            assert "1 of its items had come back to pending or waiting_retry since and are abandoned now" in r.text
            assert "act-cancel" not in await page()

    asyncio.run(go())


def test_the_guids_page_shows_a_penalty_only_while_a_sender_paces_the_guid_at_it(database_url: str) -> None:
    """A guid keeping its gateway's quiet, its row's penalty (×4) left by a sender that is gone:
    the page shows it slowed by the quiet, and no ×4, which nobody paces it at; held by a live
    sender, the ×4 shows."""
    guid = f"g-hushed-{uuid.uuid4().hex[:6]}"
    seed_job(database_url, {guid: 2})
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO guid_leases (guid, owner, lease_until, penalty, gateway_quiet_until)"
                     " VALUES (%s, 'sender-gone', now() - interval '1 minute', 4, now() + interval '10 minutes')",
                     (guid,))

    async def go() -> tuple[str, str]:
        async with control_api(database_url) as api:
            async def row() -> str:
                page = await api.client.get("http://control/console/part/guids", params={"find": guid},
                                            headers=api.auth("operator"))
                assert page.status_code == 200, page.text
                (tr,) = re.findall(r"<tr[^>]*>(?:(?!</tr>).)*" + re.escape(guid) + r"(?:(?!</tr>).)*</tr>",
                                   page.text, flags=re.S)
                return tr

            unheld = await row()
            with psycopg.connect(database_url) as conn:  # a live sender holds it
                conn.execute("UPDATE guid_leases SET lease_until = now() + interval '1 minute' WHERE guid = %s",
                             (guid,))
            return unheld, await row()

    unheld, held = asyncio.run(go())
    assert ">slowed</span>" in unheld and "quiet asked by the gateway" in unheld, unheld
    assert 'class="penalty"' not in unheld, "nobody paces it at the row's penalty"
    assert re.search(r'<small class="penalty">×4\.0</small>', held), held


def test_a_job_no_action_applies_to_offers_no_reason_box_and_says_so(database_url: str) -> None:
    done, _, _ = seed_job(database_url, {"g1": 1}, status="confirmed")
    running, _, _ = seed_job(database_url, {"g2": 1})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET status = 'completed' WHERE job_id = %s", (done,))

    async def go() -> None:
        async with control_api(database_url) as api:
            r = await api.client.get(f"http://control/console/part/jobs/{done}", headers=api.auth("admin"))
            assert 'id="job-actions"' not in r.text and "No action applies to a job completed." in r.text
            r = await api.client.get(f"http://control/console/part/jobs/{running}", headers=api.auth("admin"))
            assert 'id="job-actions"' in r.text and 'id="no-job-actions"' not in r.text

    asyncio.run(go())
