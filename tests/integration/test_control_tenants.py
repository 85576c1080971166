"""Tenants in the Control API: CRUD by admins, secrets never returned nor audited, and tokens
scoped to tenants that see and change only their tenants' jobs."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import psycopg
import pytest

from pacer_common import cli
from tests.integration.control_support import audit, control_api, rows
from tests.integration.helpers import away_from_midnight, eventually, seed_job, waiting_for_locks


def test_tenant_crud_never_shows_or_audits_a_secret(database_url: str) -> None:
    async def go() -> None:
        async with control_api(database_url) as api:
            made = await api.post("/tenants", json={"name": "acme", "base_url": "http://gw.acme", "credential":
                                                    "tok-SECRET-1", "callback_secret": "cb-SECRET-2", "max_guids": 5})
            assert made.status_code == 201, made.text
            assert made.json()["has_credential"] and made.json()["has_callback_secret"]
            assert (await api.post("/tenants", json={"name": "acme"})).status_code == 409
            assert (await api.post("/tenants", json={"name": "x"}, role="tech_admin")).status_code == 403
            listed = await api.get("/tenants", role="tech_admin")
            assert [t["name"] for t in listed.json()] == ["acme", "default"]
            changed = await api.call("PATCH", "/tenants/acme", json={"credential": "tok-SECRET-3", "max_guids": None})
            assert changed.status_code == 200 and changed.json()["max_guids"] is None
            assert changed.json()["base_url"] == "http://gw.acme"  # left out: unchanged
            assert (await api.call("PATCH", "/tenants/nope", json={})).status_code == 404
            for text in (made.text, listed.text, changed.text, json.dumps(audit(database_url, "acme"), default=str)):
                assert "SECRET" not in text
            assert rows(database_url, "SELECT credential FROM tenants WHERE name = 'acme'") == [
                {"credential": "tok-SECRET-3"}]
            assert [a["action"] for a in audit(database_url, "acme")] == ["create_tenant", "update_tenant"]
            assert (await api.call("DELETE", "/tenants/default")).status_code == 409
            assert (await api.call("DELETE", "/tenants/acme")).status_code == 200
            assert (await api.call("DELETE", "/tenants/acme")).status_code == 404

    asyncio.run(go())


def test_a_tenants_quota_day_is_set_by_its_time_zone_and_a_zone_the_database_does_not_know_is_refused(
        database_url: str) -> None:
    async def go() -> None:
        async with control_api(database_url) as api:
            made = await api.post("/tenants", json={"name": "acme", "sends_per_day": 1000, "timezone": "Europe/Berlin"})
            assert made.status_code == 201 and made.json()["timezone"] == "Europe/Berlin", made.text
            for bad in ("JST", "UTC+8", "asia/shanghai"):
                r = await api.call("PATCH", "/tenants/acme", json={"timezone": bad})
                assert r.status_code == 422 and "not one this database knows" in r.json()["detail"], r.text
            r = await api.post("/tenants", json={"name": "globex", "timezone": "Mars/Olympus"})
            assert r.status_code == 422, r.text
            changed = await api.call("PATCH", "/tenants/acme", json={"timezone": "Asia/Shanghai"})
            assert changed.json()["timezone"] == "Asia/Shanghai"
            assert (await api.call("PATCH", "/tenants/acme", json={"sends_per_day": 5})).json()["timezone"] == (
                "Asia/Shanghai"), "left out: unchanged"
            cleared = await api.call("PATCH", "/tenants/acme", json={"timezone": None})
            assert cleared.status_code == 200 and cleared.json()["timezone"] is None
            assert [t["name"] for t in (await api.get("/tenants")).json()] == ["acme", "default"]

    asyncio.run(go())


def test_a_scoped_token_sees_and_changes_only_its_tenants_jobs(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme'), ('globex')")
    mine, _, _ = seed_job(database_url, {"g1": 1})
    theirs, _, their_items = seed_job(database_url, {"g2": 1})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET tenant = 'acme' WHERE job_id = %s", (mine,))
        conn.execute("UPDATE jobs SET tenant = 'globex' WHERE job_id = %s", (theirs,))

    async def go() -> None:
        async with control_api(database_url) as api:
            refused = await api.post("/tokens", json={"name": "bad", "role": "operator", "tenants": ["nope"]})
            assert refused.status_code == 422 and "no tenant named 'nope'" in refused.text
            made = await api.post("/tokens", json={"name": "acme-ops", "role": "operator", "tenants": ["acme"]})
            assert made.status_code == 201 and made.json()["tenants"] == ["acme"]
            api.tokens["acme"] = made.json()["token"]

            listed = await api.get("/jobs", role="acme")
            assert [j["job_id"] for j in listed.json()["jobs"]] == [mine]
            assert (await api.get(f"/jobs/{mine}", role="acme")).json()["tenant"] == "acme"
            for method, path in (("GET", f"/jobs/{theirs}"), ("POST", f"/jobs/{theirs}/pause"),
                                 ("GET", f"/jobs/{theirs}/items"), ("POST", f"/items/{their_items[0]}/cancel")):
                r = await api.call(method, path, role="acme", json={"reason": "x"})
                assert r.status_code == 404, (path, r.text)
                assert "tenant(s) acme" in r.json()["detail"]
            assert rows(database_url, "SELECT status FROM jobs WHERE job_id = %s", theirs) == [{"status": "running"}]
            assert (await api.post(f"/jobs/{mine}/pause", role="acme", json={"reason": "x"})).status_code == 200
            # Whatever spans tenants is refused to a scoped token, whatever its role.
            for path in ("/guids", "/approvals", "/in-doubt", "/audit"):
                r = await api.get(path, role="acme")
                assert r.status_code == 403 and "scoped to tenant(s) acme" in r.json()["detail"], path
            # Paging from another tenant's job tells nothing of it: as if it did not exist.
            cursor = await api.get(f"/jobs?before={theirs}", role="acme")
            assert cursor.status_code == 404 and "not one of your tenants'" in cursor.json()["detail"]
            # The console: its pages that show a tenant's rows alone, its tenants' jobs only.
            console, auth = api.client, api.auth("acme")
            nav = await console.get("http://control/console/part/nav", headers=auth)
            assert nav.status_code == 200, nav.text
            assert re.findall(r'data-nav="([^"]+)"', nav.text) == ["jobs", "dead-letters"]
            jobs = await console.get("http://control/console/part/jobs", headers=auth)
            assert jobs.status_code == 200 and re.findall(r'<tr data-job="([^"]+)"', jobs.text) == [mine]
            assert (await console.get(f"http://control/console/part/jobs/{theirs}", headers=auth)).status_code == 404
            assert (await console.get("http://control/console/part/guids", headers=auth)).status_code == 403
            # An unscoped token sees every tenant.
            assert {j["job_id"] for j in (await api.get("/jobs", role="operator")).json()["jobs"]} == {mine, theirs}
            assert (await api.get(f"/jobs/{theirs}", role="operator")).status_code == 200
            assert (await api.get(f"/jobs?before={theirs}", role="operator")).status_code == 200
            everyone = await console.get("http://control/console/part/nav", headers=api.auth("operator"))
            assert re.findall(r'data-nav="([^"]+)"', everyone.text) == [
                "jobs", "approvals", "guids", "in-doubt", "dead-letters", "audit"]

    asyncio.run(go())


def test_cli_makes_a_token_scoped_to_existing_tenants_only(database_url: str, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setenv("PACER_DATABASE_URL", database_url)
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme')")
    with pytest.raises(SystemExit) as refused:
        cli.main(["token", "create", "--name", "x", "--role", "operator", "--tenant", "nope"])
    assert refused.value.code == cli.EXIT_REFUSED and "no tenant named 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        cli.main(["token", "create", "--name", "acme-ops", "--role", "operator", "--tenant", "acme"])
    assert done.value.code == 0
    capsys.readouterr()
    assert rows(database_url, "SELECT name, tenants FROM api_tokens") == [{"name": "acme-ops", "tenants": ["acme"]}]
    assert [a["after"] for a in audit(database_url, "acme-ops")] == [{"role": "operator", "tenants": ["acme"]}]


def test_a_tenants_sends_today_are_read_on_its_own_day_by_the_api_and_the_reconcilers_gauges(
        database_url: str) -> None:
    """Kiritimati (UTC+14) and Pago Pago (UTC-11) never share a date. A tenant naming no zone
    counts the senders' (the zone the newest sender published)."""
    from datetime import timedelta

    from psycopg.types.json import Jsonb

    from pacer_common.db.pool import open_pool
    from pacer_reconciler.adapters.postgres import PostgresLog

    away_from_midnight("Pacific/Kiritimati", "Pacific/Pago_Pago")  # the API and the gauges read their own today
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (name, sends_per_day, timezone) VALUES ('east', 100, 'Pacific/Kiritimati'),"
                     " ('west', 100, NULL), ('free', NULL, NULL)")
        conn.execute("INSERT INTO sender_limits (owner, limits, seen_at) VALUES ('s-old', %s, now() - interval '1 hour'),"
                     " ('s-new', %s, now())", (Jsonb({"timezone": "Pacific/Kiritimati"}),
                                               Jsonb({"timezone": "Pacific/Pago_Pago"})))
        east, west = conn.execute("SELECT (now() AT TIME ZONE 'Pacific/Kiritimati')::date,"
                                  " (now() AT TIME ZONE 'Pacific/Pago_Pago')::date").fetchone()
        conn.execute("INSERT INTO tenant_usage (tenant, day, sends) VALUES ('east', %(e)s, 7), ('east', %(w)s, 50),"
                     " ('west', %(w)s, 3), ('west', %(e)s, 40), ('free', %(w)s, 9)", {"e": east, "w": west})

    async def go() -> tuple[dict[str, int], dict[str, int]]:
        async with control_api(database_url) as api:
            listed = {t["name"]: t["sends_today"] for t in (await api.get("/tenants")).json()}
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            stats = await PostgresLog(pool, "reconciler", timedelta(seconds=60)).governance_stats(None)
        finally:
            await pool.close()
        return listed, {k: v for k, v in stats.items() if k.startswith("tenant_")}

    listed, gauges = asyncio.run(go())
    assert listed == {"default": 0, "east": 7, "west": 3, "free": 9}
    assert gauges == {"tenant_sends:east": 7, "tenant_quota:east": 100, "tenant_sends:west": 3,
                      "tenant_quota:west": 100}, "a tenant without a quota has no gauge"


def test_a_tenant_change_audits_what_it_replaced_when_another_change_commits_first(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, sends_per_day) VALUES ('acme', 100)")

    async def go() -> None:
        async with control_api(database_url) as api, await psycopg.AsyncConnection.connect(database_url) as other:
            await other.execute("UPDATE tenants SET sends_per_day = 200 WHERE name = 'acme'")  # not committed yet
            change = asyncio.create_task(api.call("PATCH", "/tenants/acme", json={"max_guids": 5}))
            await eventually(lambda: waiting_for_locks(database_url), 15, "the API's change waiting for the other")
            await other.commit()
            r = await change
            assert r.status_code == 200, r.text

    asyncio.run(go())
    (entry,) = [a for a in audit(database_url, "acme") if a["action"] == "update_tenant"]
    assert (entry["before"]["sends_per_day"], entry["after"]["sends_per_day"]) == (200, 200), entry
    assert (entry["before"]["max_guids"], entry["after"]["max_guids"]) == (None, 5)
