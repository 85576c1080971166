"""A guid's backlog and wait through the Control API, shedding in the job's progress and
report, and per-job weights and rates set hot (role-checked, validated, audited)."""

from __future__ import annotations

import asyncio
import csv
import io

import pytest

from pacer_sender.adapters.queue import PostgresGuidQueue
from pacer_sender.domain.pacing import Drain
from tests.integration.control_support import audit, control_api, rows
from tests.integration.helpers import add_job, run


def test_backlog_per_guid_and_the_guids_by_backlog_or_by_wait(database_url: str) -> None:
    url = database_url
    add_job(url, "deep", 30, age_s=20)
    add_job(url, "deep", 5, not_before_in_s=600)
    add_job(url, "deep", 2, priority=1, age_s=5)
    add_job(url, "old", 3, age_s=900)

    async def go() -> None:
        async with control_api(url) as api:
            deep = (await api.get("/guids/deep", "operator")).json()["backlog"]
            assert deep["by_lane"] == {"batch": {"ready": 30, "scheduled": 5}, "online": {"ready": 2}}
            assert deep["queued"] == 37 and 19 < deep["oldest_wait_s"] < 120
            assert deep["drain_s"] is None, "no sends this hour: no rate to drain at"
            by_backlog = (await api.get("/backlog?limit=1", "operator")).json()["guids"]
            assert [(g["guid"], g["queued"], g["batch_ready"], g["online_ready"], g["scheduled"])
                    for g in by_backlog] == [("deep", 37, 30, 2, 5)]
            by_wait = (await api.get("/backlog?sort=wait&limit=5", "operator")).json()["guids"]
            assert [g["guid"] for g in by_wait] == ["old", "deep"] and by_wait[0]["oldest_wait_s"] >= 899
            assert (await api.get("/backlog?sort=size", "operator")).status_code == 422
            assert (await api.get("/backlog", None)).status_code == 401
            assert (await api.get("/guids/nobody", "operator")).status_code == 404

    asyncio.run(go())


def test_the_time_to_drain_is_the_queue_over_the_guids_sends_per_second_this_hour(database_url: str) -> None:
    """A guid's rate is its lease's sends this hour over the part of the hour gone by (at least
    a minute); a count of an earlier hour is no rate at all. The guid's page and the list
    by backlog say the same."""
    url = database_url
    add_job(url, "drain-busy", 40)
    add_job(url, "drain-stale", 10)
    clock = ("SELECT floor(extract(epoch FROM now()) / 3600)::bigint AS hour,"
             " extract(epoch FROM now())::float8 - floor(extract(epoch FROM now()) / 3600) * 3600 AS into_s")

    async def go() -> tuple[dict, dict, dict, float, float]:
        async with control_api(url) as api:
            for _ in range(3):  # an hour that ends between the write and the reads is tried again
                (before,) = rows(url, clock)
                rows(url, "INSERT INTO guid_leases (guid, windows) VALUES"
                          " ('drain-busy', jsonb_build_object('hour', jsonb_build_array(%s::bigint, 120))),"
                          " ('drain-stale', jsonb_build_object('hour', jsonb_build_array(%s::bigint - 1, 500)))"
                          " ON CONFLICT (guid) DO UPDATE SET windows = EXCLUDED.windows RETURNING guid",
                     before["hour"], before["hour"])
                busy = (await api.get("/guids/drain-busy", "operator")).json()["backlog"]
                stale = (await api.get("/guids/drain-stale", "operator")).json()["backlog"]
                listed = {g["guid"]: g for g in (await api.get("/backlog?limit=100", "operator")).json()["guids"]}
                (after,) = rows(url, clock)
                if after["hour"] == before["hour"]:
                    return busy, stale, listed, before["into_s"], after["into_s"]
        raise AssertionError("three hours ended while reading")

    busy, stale, listed, into_before, into_after = asyncio.run(go())
    slowest, fastest = 120 / max(60.0, into_after), 120 / max(60.0, into_before)
    assert slowest <= busy["sends_per_s"] <= fastest
    assert busy["drain_s"] == pytest.approx(40 / busy["sends_per_s"])
    assert 40 / fastest <= listed["drain-busy"]["drain_s"] <= 40 / slowest
    assert stale["sends_per_s"] is None and stale["drain_s"] is None, "last hour's count is no rate"
    assert listed["drain-stale"]["drain_s"] is None


def test_shed_items_show_in_the_jobs_progress_and_report(database_url: str) -> None:
    url = database_url
    job = add_job(url, "g", 50, expire_in_s=10)
    shed = run(url, lambda pool: PostgresGuidQueue(pool).shed("g", Drain(1.0)))
    assert 39 <= shed <= 41

    async def go() -> tuple[dict, str]:
        async with control_api(url) as api:
            view = (await api.get(f"/jobs/{job}", "operator")).json()
            report = (await api.get(f"/jobs/{job}/report.csv", "operator")).text
        return view, report

    view, report = asyncio.run(go())
    assert view["shed"] == shed
    assert {"error_class": "shed", "total": shed, "by_status": {"expired": shed}} in view["failures"]
    lines = list(csv.DictReader(io.StringIO(report)))
    assert sum(r["last_error_class"] == "shed" and r["status"] == "expired" for r in lines) == shed


def test_a_jobs_weight_and_rate_are_set_hot_checked_and_audited(database_url: str) -> None:
    url = database_url
    job = add_job(url, "g", 5)
    target = f"job:{job}"

    async def go() -> None:
        async with control_api(url) as api:
            r = await api.call("PUT", f"/guids/{target}/limits", "operator", json={"weight": 3})
            assert r.status_code == 403
            r = await api.call("PUT", f"/guids/{target}/limits?reason=launch", "tech_admin",
                               json={"weight": 3, "min_interval_s": 20})
            assert r.status_code == 200, r.text
            assert r.json()["limits"] == {"weight": 3.0, "min_interval_s": 20.0}
            for bad, why in [({"weight": 0}, "weight"), ({"per_hour": 10}, "unknown limit"),
                             ({"weight": None}, "cannot be null")]:
                r = await api.call("PUT", f"/guids/{target}/limits", "tech_admin", json=bad)
                assert r.status_code == 422 and why in r.json()["detail"], (bad, r.text)
            r = await api.call("PUT", "/guids/g/limits", "tech_admin", json={"weight": 3})
            assert r.status_code == 422, "a weight is a job's, not a guid's"
            r = await api.call("PUT", "/guids/g/limits", "tech_admin", json={"shed": False, "online_yield_s": 30})
            assert r.status_code == 200, r.text
            # The change is the job's: the Audit page filtered by the job finds it.
            found = (await api.get(f"/audit?target_type=job&target_id={job}", "tech_admin")).json()["entries"]
            assert [(e["action"], e["target_type"], e["target_id"]) for e in found] == [("set_limits", "job", job)]

    asyncio.run(go())
    (row,) = rows(url, "SELECT limits FROM guid_limits WHERE guid = %s", target)
    assert row["limits"] == {"weight": 3.0, "min_interval_s": 20.0}
    log = audit(url, job)
    assert [(a["action"], a["target_type"], a["reason"]) for a in log] == [("set_limits", "job", "launch")]
    assert log[0]["after"] == {"limits": {"weight": 3.0, "min_interval_s": 20.0}}
    assert audit(url, target) == [], "not under the limits row's name"
    # A guid's own limits stay audited on the guid.
    assert [(a["action"], a["target_type"]) for a in audit(url, "g")] == [("set_limits", "guid")]
