"""What an operator sees in the console, in a real browser over the real services."""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from playwright.sync_api import Dialog, Locator, Page, expect

from pacer_common.kafka import make_producer, produce_all
from pacer_control.api.console import DLQ_LAST
from pacer_dev.stack import Stack
from tests.browser.conftest import APPROVAL_ABOVE, FAILING_GUID, SANDBOX, login, shot
from tests.integration.helpers import seed_job, wait_for

pytestmark = pytest.mark.browser


# No item of the job in flight, and each of its guids with a pending item has one marked held:
# the sender tried it after the pause and did not claim it (pacer_begin_send).
_SETTLED_ON_HOLD = """
SELECT NOT EXISTS (SELECT 1 FROM items i WHERE i.job_id = j.job_id AND i.status IN ('claimed', 'submitted'))
   AND NOT EXISTS (SELECT 1 FROM items i WHERE i.job_id = j.job_id AND i.status = 'pending'
                   GROUP BY i.guid HAVING NOT bool_or(i.held))
FROM jobs j WHERE j.request_id = %s"""


def publish_job(stack: Stack, per_guid: int, guids: tuple[str, ...]) -> str:
    rid = f"ui-{uuid.uuid4().hex[:8]}"
    req = {"request_id": rid, "kind": "campaign", "created_by": "ui-test", "content_version": 1,
           "message": {"type": "text", "content": "Hello {n}"},
           "targets": {"mode": "snapshot", "items": [
               {"guid": g, "to_id": f"room-{g}-{i}", "vars": {"n": str(i)}} for g in guids for i in range(per_guid)]},
           "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}
    produce_all(make_producer({"bootstrap.servers": stack.infra.kafka_bootstrap}),
                [(f"{stack.topic_prefix}.job-requests", rid.encode(), json.dumps(req).encode(), None)])
    return rid


def sql(stack: Stack, query: str, *args: object) -> list[tuple]:
    with psycopg.connect(stack.infra.database_url, autocommit=True) as conn:
        cur = conn.execute(query, args)
        return cur.fetchall() if cur.description else []


def job_id_of(stack: Stack, rid: str) -> str:
    return wait_for(lambda: (r := sql(stack, "SELECT job_id::text FROM jobs WHERE request_id = %s", rid)) and r[0][0],
                    30, f"job {rid} planned")


@contextlib.contextmanager
def cancelled_after(stack: Stack, tokens: dict[str, str], rid: str) -> Iterator[str]:
    """The job of request ``rid`` (its id), cancelled when the block ends, so that its guid's
    backlog does not go on into the next test."""
    job = job_id_of(stack, rid)
    try:
        yield job
    finally:
        httpx.post(f"{stack.procs['control'].url}/api/v1/jobs/{job}/cancel", timeout=10,
                   headers={"Authorization": f"Bearer {tokens['admin']}"}, json={"reason": "test done"})


def guid_health(page: Page, console_url: str, token: str, guid: str) -> Locator:
    """The Guids page's health cell of ``guid``, as the holder of ``token`` sees it."""
    login(page, console_url, token)
    page.click('nav a[data-nav="guids"]')
    return find_guid(page, guid).locator("td").nth(1)


def find_guid(page: Page, guid: str) -> Locator:
    """The Guids page's row of ``guid``, found by name."""
    page.fill("#guid-find input[name=find]", guid)
    page.click("#guid-find button")
    listed = page.locator("#guids tbody tr").first
    expect(listed).to_have_attribute("data-guid", guid)
    return listed


def delivered_on_page(page: Page) -> int:
    return int(page.locator('[data-count="delivered"]').inner_text())


def test_operator_watches_progress_reads_failure_categories_and_pauses_the_job(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    rid = publish_job(stack, 60, ("ui-a", "ui-b", FAILING_GUID))
    job_id = job_id_of(stack, rid)
    login(page, console_url, tokens["operator"])

    # The jobs list shows the job with its progress bar.
    row = page.locator(f'tr[data-job="{job_id}"]')
    expect(row).to_be_visible()
    expect(row.locator('[role="progressbar"]')).to_be_visible()
    shot(page, "jobs")
    row.locator("a").click()
    page.wait_for_url(f"{console_url}/jobs/{job_id}")

    # Progress moves on screen while the senders work.
    wait_for(lambda: page.locator('[data-count="delivered"]').count() and delivered_on_page(page) > 0, 20,
             "first deliveries on the page")
    first = delivered_on_page(page)
    wait_for(lambda: delivered_on_page(page) > first, 10, "the delivered count to move on the page")

    # Failures in categories, with an example and the gateway's reason.
    category = page.locator('#failures tr[data-category="bad_params"]')
    expect(category).to_be_visible()
    expect(category).to_contain_text("room-ui-bad-")
    expect(page.locator("#failed-items")).to_contain_text("bad_params")
    # Cancel says on screen that it does not undo what was sent; an operator may not terminate.
    expect(page.locator(".semantics")).to_contain_text("Cancel does not undo messages already sent")
    expect(page.locator("button.act-terminate")).to_have_count(0)
    shot(page, "job")

    # Pause: the confirmation states its semantics; no send starts after it, those in flight
    # finish; the job shows paused.
    dialogs: list[str] = []

    def on_dialog(d: Dialog) -> None:
        dialogs.append(d.message)
        d.accept()

    page.on("dialog", on_dialog)
    page.fill(".actions input[name=reason]", "customer asked to hold")
    shown_at = page.url
    page.press(".actions input[name=reason]", "Enter")  # the form has no action: Enter did a GET of the page
    page.click("button.act-pause")
    # The database's clock as a read first sees the job paused: no earlier than the pause's commit.
    seen_paused = wait_for(lambda: (r := sql(stack, "SELECT clock_timestamp() FROM jobs WHERE request_id = %s"
                                                    " AND status = 'paused'", rid)) and r[0][0],
                           30, "the job paused")
    assert "in flight finish" in dialogs[0] and len(dialogs) == 1, dialogs
    assert page.url == shown_at, "Enter in the reason field left the page"
    expect(page.locator("#job-status")).to_have_text("paused")
    expect(page.locator("#flash")).to_contain_text("running → paused")
    # The sends in flight finish, and the sender, back at each of the job's guids that still
    # has work, finds the job on hold: it marks the item held instead of claiming it.
    wait_for(lambda: sql(stack, _SETTLED_ON_HOLD, rid)[0][0], 30,
             "the sends in flight finished and every guid of the job with work left found on hold")
    settled_at = time.time()
    # Every item of the job the gateway got was claimed before the pause was seen committed:
    # none was claimed after it, and each send is of one of those claims.
    claimed = dict(sql(stack, "SELECT i.idem_key, max(e.occurred_at) FROM items i JOIN jobs j USING (job_id)"
                              " JOIN item_events e ON e.item_id = i.item_id AND e.type = 'ItemClaimed'"
                              " WHERE j.request_id = %s GROUP BY 1", rid))
    late = sorted(at - seen_paused for at in claimed.values() if at > seen_paused)
    assert not late, f"{len(late)} items claimed after the pause was seen committed, from {late[0]} after it"
    sends = httpx.get(f"{stack.gateway_url}/_admin/sends?limit=100000", timeout=5).json()["sends"]
    keys = {k for (k,) in sql(stack, "SELECT idem_key FROM items i JOIN jobs j USING (job_id)"
                                     " WHERE j.request_id = %s", rid)}
    sent = [s["idempotencyKey"] for s in sends if s["idempotencyKey"] in keys]
    assert sent and set(sent) <= set(claimed), "a send of the job's that no claim before the pause began"
    # The page loaded again after that shows the same count: nothing more went out.
    frozen = sql(stack, "SELECT count(*) FROM items i JOIN jobs j USING (job_id) WHERE j.request_id = %s"
                        " AND i.status = 'confirmed'", rid)[0][0]
    page.reload()
    wait_for(lambda: float(page.locator(".summary").get_attribute("data-counts-read") or 0) > settled_at, 30,
             "the progress's counts read once the sender found the job on hold")
    assert delivered_on_page(page) == frozen
    assert 0 < frozen < 120, "paused mid-run"
    shot(page, "job-paused")

    # The CSV report, fetched with the token (a plain link could not carry it).
    with page.expect_download() as download:
        page.click("[data-download]")
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines[0].startswith("item_id,") and len(lines) == 1 + 180


_WATCH_POLLS = """() => {
  window.pacerPolls = [];  // what a part asked (also when refused) and what went out
  for (const [type, what] of [["htmx:beforeRequest", "asked"], ["htmx:beforeSend", "sent"]]) {
    document.addEventListener(type, (e) => window.pacerPolls.push(
      {what, part: e.detail.elt.id, at: performance.now(), hidden: document.hidden}));
  }
  window.pacerHidden = false;  // the tab's visibility, as the test sets it
  Object.defineProperty(document, "hidden", {configurable: true, get: () => window.pacerHidden});
}"""
_SHOW = """(hidden) => {
  const at = performance.now();  // before the event: htmx reads a part within its dispatch
  window.pacerHidden = hidden;
  document.dispatchEvent(new Event("visibilitychange"));
  return at;
}"""
_FLIP = """() => {  // hidden and shown again at once: no poll can come round in between
  const at = performance.now();
  for (const hidden of [true, false]) {
    window.pacerHidden = hidden;
    document.dispatchEvent(new Event("visibilitychange"));
  }
  return [at, performance.now()];
}"""
_PARTS = ("progress", "failures-part", "shards-part")


def test_a_hidden_tab_reads_nothing_and_reads_every_part_again_once_shown(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    job_id = job_id_of(stack, publish_job(stack, 2, ("ui-hidden",)))
    login(page, console_url, tokens["operator"])
    page.goto(f"{console_url}/jobs/{job_id}")
    expect(page.locator("#shards tr[data-shard]")).to_have_count(1)
    page.evaluate(_WATCH_POLLS)

    def polls(what: str, part: str | None = None, since: float = 0.0) -> list[dict[str, Any]]:
        return [p for p in page.evaluate("window.pacerPolls")
                if p["what"] == what and part in (None, p["part"]) and float(p["at"]) >= since]

    # A tab hidden and shown at once reads nothing more: no part's poll came round meanwhile.
    flipped, back = page.evaluate(_FLIP)
    assert not [p for p in polls("asked", since=flipped) if float(p["at"]) <= back], "a flip read a part"

    hidden_at = page.evaluate(_SHOW, True)
    # Each part's poll comes round (the failures' every 10 s) and is refused: nothing goes out.
    wait_for(lambda: len(polls("asked", "progress", hidden_at)) >= 3 and polls("asked", "failures-part", hidden_at),
             25, "the parts' polls while the tab is hidden")
    assert not polls("sent", since=hidden_at), "a hidden tab read a part"
    asked = float(polls("asked", "failures-part", hidden_at)[-1]["at"])
    shown_at = page.evaluate(_SHOW, False)
    assert shown_at - asked < 3000, "the tab was not shown right after the failures' poll"
    # Shown again: every part is read at once, the failures well before their next poll.
    sent = wait_for(lambda: all(polls("sent", part, shown_at) for part in _PARTS) and {
        part: float(polls("sent", part, shown_at)[0]["at"]) for part in _PARTS}, 8, "every part read once shown",
        lambda: [p for p in page.evaluate("window.pacerPolls") if float(p["at"]) >= shown_at])
    assert sent["failures-part"] < asked + 9000, (sent, asked)
    # and each goes on at its pace: the progress every second
    wait_for(lambda: len(polls("sent", "progress", shown_at)) >= 3, 10, "the progress polled again once shown")
    expect(page.locator("#failures-part")).not_to_contain_text("Loading")


def test_operator_is_not_offered_locks_and_the_api_refuses_a_forced_release(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    login(page, console_url, tokens["operator"])
    expect(page.locator("nav")).not_to_contain_text("Locks")
    page.goto(f"{console_url}/locks")
    expect(page.locator("#flash")).to_contain_text("403")
    expect(page.locator("button", has_text="Force release")).to_have_count(0)
    r = httpx.post(f"{stack.procs['control'].url}/api/v1/guids/ui-a/release-lock",
                   headers={"Authorization": f"Bearer {tokens['operator']}"}, json={"reason": "try"})
    assert r.status_code == 403, r.text
    assert "may not force-release guid leases" in r.json()["detail"]


def test_admin_force_releases_a_lock_with_a_reason_and_finds_it_in_the_audit(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    guid = f"ui-held-{uuid.uuid4().hex[:6]}"
    sql(stack, "INSERT INTO guid_leases (guid, owner, epoch, since, lease_until) "
               "VALUES (%s, 'sender-stuck', 7, now(), now() + interval '1 hour')", guid)
    login(page, console_url, tokens["admin"])
    page.click('nav a[data-nav="locks"]')
    row = page.locator(f'#guid-leases tr[data-guid="{guid}"]')
    expect(row).to_contain_text("sender-stuck")
    shot(page, "locks")
    # The reason is required: the browser refuses to submit without one.
    page.once("dialog", lambda d: d.accept())
    row.locator("button", has_text="Force release").click()
    expect(row.locator("input[name=reason]:invalid")).to_have_count(1)
    row.locator("input[name=reason]").fill("sender host is gone")
    page.once("dialog", lambda d: d.accept())
    row.locator("button", has_text="Force release").click()
    expect(page.locator("#flash .ok")).to_be_visible()
    assert sql(stack, "SELECT owner FROM guid_leases WHERE guid = %s", guid) == [(None,)]

    page.click('nav a[data-nav="audit"]')
    page.fill("input[name=target_id]", guid)
    page.click("form.filters button")
    entry = page.locator('#audit tr[data-action="release_lock"]')
    expect(entry).to_contain_text("sender host is gone")
    expect(entry).to_contain_text("token:ui-admin")
    shot(page, "audit")


def in_doubt_send(stack: Stack) -> tuple[str, str]:
    """An unverified send (its item id and key), of a guid held so no sender takes it again."""
    guid = f"ui-doubt-{uuid.uuid4().hex[:6]}"
    sql(stack, "SELECT pacer_hold_guid(%s, 'test: held so no sender takes it', 'test')", guid)
    rid = publish_job(stack, 1, (guid,))
    job_id = job_id_of(stack, rid)
    (item, key) = wait_for(lambda: sql(stack, "SELECT item_id::text, idem_key FROM items WHERE job_id = %s"
                                              " AND status = 'pending'", job_id), 10, "the item")[0]
    # As if the gateway's answer was lost and no lookup could tell: submitted → recovery_pending → unverified.
    for src, dst, typ in (("pending", "claimed", "ItemClaimed"), ("claimed", "submitted", "ItemSubmitted"),
                          ("submitted", "recovery_pending", "ItemInDoubt"),
                          ("recovery_pending", "unverified", "ItemUnverified")):
        sql(stack, "SELECT pacer_transition(ARRAY[%s::uuid], ARRAY[%s]::item_status[], %s::item_status, %s,"
                   " p_lease_owner => 'x', p_lease_ttl => interval '30 s', p_clear_lease => %s)",
            item, src, dst, typ, dst != "claimed")
    sql(stack, "INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state) VALUES (%s, %s, %s, 'r', "
               "'reserved')", key, item, guid)
    return item, key


def in_doubt_card(page: Page, console_url: str, tokens: dict[str, str], item: str) -> Locator:
    """The In doubt page's card of ``item``, as a tech admin sees it, its ledger key reserved."""
    login(page, console_url, tokens["tech_admin"])
    page.click('nav a[data-nav="in-doubt"]')
    card = page.locator(f'article[data-item="{item}"]')
    expect(card).to_contain_text("ledger: reserved")
    return card


def test_tech_admin_resolves_an_in_doubt_send_as_delivered(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    item, key = in_doubt_send(stack)

    card = in_doubt_card(page, console_url, tokens, item)
    expect(card).to_contain_text("ItemInDoubt")
    card.locator("input[name=reason]").fill("customer confirmed receipt by phone")
    shot(page, "in-doubt")
    page.once("dialog", lambda d: d.accept())
    card.locator("button", has_text="Delivered").first.click()
    expect(page.locator("#flash")).to_contain_text("resolved as delivered")
    assert sql(stack, "SELECT status::text FROM items WHERE item_id = %s", item) == [("confirmed",)]
    assert sql(stack, "SELECT state FROM send_ledger WHERE idem_key = %s", key) == [("sent",)]
    assert sql(stack, "SELECT actor, reason FROM audit_log WHERE action = 'resolve' AND target_id = %s", item) == [
        ("token:ui-tech_admin", "customer confirmed receipt by phone")]


def test_enter_in_the_reason_field_resolves_nothing_and_each_verdict_is_confirmed_by_name(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    item, key = in_doubt_send(stack)
    card = in_doubt_card(page, console_url, tokens, item)
    shown_at = page.url
    asked: list[str] = []
    accept = [True]  # an operator who says OK to what the page asks, but for the one declined below

    def answer(d: Dialog) -> None:
        asked.append(d.message)
        if accept[0]:
            d.accept()
        else:
            d.dismiss()

    page.on("dialog", answer)
    reason = card.locator("input[name=reason]")
    reason.fill("customer never got it")
    reason.press("Enter")  # "Delivered" was the form's default button: this resolved the send as delivered
    assert asked == [], f"Enter in the reason field asked {asked!r}"
    accept[0] = False
    card.get_by_role("button", name="Delivered", exact=True).click()  # asked, and declined
    accept[0] = True
    card.get_by_role("button", name="Not delivered: send again").click()
    expect(page.locator("#flash")).to_contain_text("resolved as not delivered: pending again")
    shot(page, "in-doubt-resolved")

    # Enter asked nothing and sent nothing; each button's question named its own verdict.
    assert len(asked) == 2, asked
    assert "as DELIVERED?" in asked[0] and "never sent again" in asked[0]
    assert "as NOT DELIVERED?" in asked[1] and "sent again under the same key" in asked[1]
    assert page.url == shown_at  # nor did Enter submit the form to the page's address
    assert sql(stack, "SELECT status::text FROM items WHERE item_id = %s", item) == [("pending",)]
    assert sql(stack, "SELECT state FROM send_ledger WHERE idem_key = %s", key) == []  # its key released
    assert sql(stack, "SELECT actor, reason FROM audit_log WHERE action = 'resolve' AND target_id = %s", item) == [
        ("token:ui-tech_admin", "customer never got it")]
    assert sql(stack, "SELECT type FROM item_events WHERE item_id = %s AND type LIKE 'ItemResolved%%'", item) == [
        ("ItemResolvedNotDelivered",)]


def test_a_large_job_waits_for_an_admin_who_approves_it_from_its_preview(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    per_guid = APPROVAL_ABOVE // 2 + 25
    rid = publish_job(stack, per_guid, ("ui-big-1", "ui-big-2"))
    job_id = job_id_of(stack, rid)
    assert sql(stack, "SELECT status FROM jobs WHERE job_id = %s", job_id) == [("awaiting_approval",)]

    # An operator sees it waiting but is not offered the decision, and the API refuses it.
    login(page, console_url, tokens["operator"])
    page.click('nav a[data-nav="approvals"]')
    card = page.locator(f'article[data-job="{job_id}"]')
    expect(card).to_contain_text(f"{2 * per_guid} items, above {APPROVAL_ABOVE}")
    expect(card.locator("button.approve")).to_have_count(0)
    r = httpx.post(f"{stack.procs['control'].url}/api/v1/jobs/{job_id}/approve",
                   headers={"Authorization": f"Bearer {tokens['operator']}"})
    assert r.status_code == 403, r.text

    page.evaluate("sessionStorage.clear()")
    login(page, console_url, tokens["admin"])
    page.click('nav a[data-nav="approvals"]')
    card = page.locator(f'article[data-job="{job_id}"]')
    expect(card.locator("[data-items]")).to_have_text(str(2 * per_guid))
    expect(card.locator("table.samples")).to_contain_text("Hello ")  # rendered: no template field left
    expect(card.locator("table.samples")).not_to_contain_text("{n}")
    expect(card.locator("table.guids")).to_contain_text("ui-big-1")
    expect(card.locator("[data-duration]")).not_to_be_empty()
    shot(page, "approvals")
    # Nothing was sent while it waited.
    assert sql(stack, "SELECT count(*) FROM items WHERE job_id = %s AND status <> 'pending'", job_id) == [(0,)]

    card.locator("input[name=reason]").fill("copy checked with marketing")
    shown_at = page.url
    card.locator("input[name=reason]").press("Enter")  # neither approves nor does a GET of the page
    assert page.url == shown_at, "Enter in the reason field left the page"
    page.once("dialog", lambda d: d.accept())
    card.locator("button.approve").click()
    expect(page.locator("#flash")).to_contain_text("job approved")
    expect(page.locator(f'article[data-job="{job_id}"]')).to_have_count(0)
    wait_for(lambda: sql(stack, "SELECT count(*) FROM items WHERE job_id = %s AND status = 'confirmed'", job_id)[0][0],
             20, "the approved job's first deliveries")
    assert sql(stack, "SELECT actor, reason FROM audit_log WHERE action = 'approve' AND target_id = %s", job_id) == [
        ("token:ui-admin", "copy checked with marketing")]


def test_a_test_send_goes_out_like_any_item_under_the_guid_lease_and_the_ledger(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    guid = f"ui-test-{uuid.uuid4().hex[:6]}"
    login(page, console_url, tokens["tech_admin"])
    page.click('nav a[data-nav="guids"]')
    form = page.locator("#test-send form")
    form.locator("input[name=guid]").fill(guid)
    form.locator("input[name=content]").fill("sandbox check")
    form.locator("button").click()
    expect(page.locator("#flash")).to_contain_text("sent like any other item")
    (item, key) = sql(stack, "SELECT item_id::text, idem_key FROM items WHERE guid = %s", guid)[0]
    wait_for(lambda: sql(stack, "SELECT status::text FROM items WHERE item_id = %s", item) == [("confirmed",)], 30,
             "the test send delivered")
    assert sql(stack, "SELECT state FROM send_ledger WHERE idem_key = %s", key) == [("sent",)]
    page.reload()
    # Its lease made it a guid; with its one item sent, nothing is queued for it.
    expect(page.locator(f'#guids tr[data-guid="{guid}"] .status')).to_have_text("idle")
    shot(page, "guids")
    # It was claimed by a sender holding the guid's lease, not sent by the Control API.
    owners = sql(stack, "SELECT payload ->> 'owner' FROM item_events WHERE item_id = %s AND type = 'ItemClaimed'", item)
    assert owners and owners[0][0].startswith("sender-")
    assert sql(stack, "SELECT owner IS NOT NULL OR epoch > 0 FROM guid_leases WHERE guid = %s", guid) == [(True,)]
    sends = httpx.get(f"{stack.gateway_url}/_admin/sends?limit=1000", timeout=5).json()["sends"]
    assert [(s["toId"], s["content"]) for s in sends if s["idempotencyKey"] == key] == [(SANDBOX, "sandbox check")]


def test_the_api_docs_render_from_assets_served_by_pacer(stack: Stack, page: Page) -> None:
    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(stack.procs["control"].url) else None)
    page.goto(f"{stack.procs['control'].url}/api/v1/docs")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
    expect(page.locator(".swagger-ui")).to_contain_text("/jobs/{job_id}/approve")
    shot(page, "api-docs")
    assert outside == [], f"requests to elsewhere: {outside}"


def test_an_operator_finds_the_busiest_guid_pauses_it_and_finds_it_again_by_name(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    guid = f"ui-queue-{uuid.uuid4().hex[:6]}"
    seed_job(stack.infra.database_url, {guid: 400})  # more than any other guid of this stack queues
    sql(stack, "UPDATE items SET not_before = now() + interval '1 hour' WHERE guid = %s", guid)  # stays queued
    sql(stack, "INSERT INTO guid_leases (guid) VALUES (%s) ON CONFLICT DO NOTHING", guid)  # listed by name
    login(page, console_url, tokens["operator"])
    page.click('nav a[data-nav="guids"]')
    # by name: queued, none ready (all due in an hour), so waiting, not sending
    listed = find_guid(page, guid)
    expect(listed.locator("td").nth(1)).to_contain_text("waiting")
    expect(listed.locator("td").nth(2)).to_have_text("400 0 ready")
    shot(page, "guids-waiting")
    page.fill("#guid-find input[name=find]", "")
    page.select_option("#guid-find select[name=sort]", "backlog")
    page.click("#guid-find button")
    row = page.locator("#backlogs tbody tr").first
    expect(row).to_have_attribute("data-guid", guid)
    expect(row.locator("td").nth(3)).to_have_text("400")  # scheduled
    expect(row.locator("td.guid")).to_have_css("white-space", "nowrap")
    shot(page, "guids-busiest")

    row.locator("input[name=reason]").fill("too much queued")
    page.once("dialog", lambda d: d.accept())
    row.locator("button", has_text="Pause").click()
    expect(page.locator("#flash")).to_contain_text(f"guid {guid} paused")
    # The action's refresh shows the busiest list again (the view the operator was on, not the page's
    # first), and a paused guid's work is held, not backlog: the guid has left it.
    expect(page.locator(f'#backlogs tbody tr[data-guid="{guid}"]')).to_have_count(0)
    expect(page.locator("#backlogs")).to_be_visible()
    expect(page.locator("#guid-find select[name=sort]")).to_have_value("backlog")
    shot(page, "guids-busiest-after-pause")

    page.select_option("#guid-find select[name=sort]", "name")
    found = find_guid(page, guid)
    expect(found).to_contain_text("too much queued")
    found.locator("a", has_text="history").click()
    expect(page.locator("#guid-history")).to_contain_text(f"Lifecycle of {guid}")
    expect(page.locator("#guid-history")).to_be_in_viewport()


def _shown_after_reload(page: Page, rows: Locator, count: int = 1) -> bool:
    page.reload()
    page.wait_for_selector("#dead-letters")  # the part, loaded after the page
    return rows.count() == count


def test_tech_admin_reads_why_a_request_was_refused_fixes_the_cause_and_republishes_it(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    tenant = f"ui-late-{uuid.uuid4().hex[:6]}"
    rid = f"ui-{uuid.uuid4().hex[:8]}"
    req = {"request_id": rid, "kind": "campaign", "created_by": "ui-test", "tenant": tenant,
           "message": {"type": "text", "content": "Hello"},
           "targets": {"mode": "snapshot", "items": [{"guid": "ui-dl", "to_id": "room-dl"}]},
           "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}
    produce_all(make_producer({"bootstrap.servers": stack.infra.kafka_bootstrap}),
                [(f"{stack.topic_prefix}.job-requests", rid.encode(), json.dumps(req).encode(), None)])

    login(page, console_url, tokens["tech_admin"])
    page.click('nav a[data-nav="dead-letters"]')
    row = page.locator("#dead-letters tr", has_text=rid)
    # The planner refuses it (no such tenant yet); the page shows it once reloaded after that.
    wait_for(lambda: _shown_after_reload(page, row), 30, "the refused request on the Dead letters page")
    expect(row).to_contain_text(f"unknown tenant '{tenant}'")
    expect(row).to_contain_text(tenant)
    row.locator("button", has_text="Show").click()
    letter = page.locator("article.letter")
    expect(letter.locator("pre.body")).to_contain_text(f'"request_id": "{rid}"')
    shot(page, "dead-letters")

    sql(stack, "INSERT INTO tenants (name) VALUES (%s)", tenant)  # what refused it, fixed
    letter.locator("input[name=reason]").fill("tenant created")
    page.once("dialog", lambda d: d.accept())
    letter.locator("button", has_text="Republish").click()
    expect(page.locator("#flash .ok")).to_contain_text("republished")
    job_id_of(stack, rid)  # planned this time
    where = row.get_attribute("data-where")
    assert sql(stack, "SELECT actor, reason FROM audit_log WHERE action = 'republish' AND target_id = %s",
               f"{stack.topic_prefix}.job-requests.dlq:{where}") == [("token:ui-tech_admin", "tenant created")]


def test_an_operator_reads_dead_letters_but_is_offered_no_republish(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    produce_all(make_producer({"bootstrap.servers": stack.infra.kafka_bootstrap}),
                [(f"{stack.topic_prefix}.job-requests", b"ui-not-json", b"{not json", None)])
    login(page, console_url, tokens["operator"])
    page.click('nav a[data-nav="dead-letters"]')
    row = page.locator("#dead-letters tr", has_text="ui-not-json")
    wait_for(lambda: _shown_after_reload(page, row), 30, "the refused request on the Dead letters page")
    expect(row).to_contain_text("Invalid JSON")
    row.locator("button", has_text="Show").click()
    expect(page.locator("article.letter pre.body")).to_contain_text("{not json")
    expect(page.locator("button", has_text="Republish")).to_have_count(0)
    # Found again by its key, among every other refused request.
    page.fill("form.filters input[name=key]", "ui-not-json")
    page.click("form.filters button")
    expect(page.locator("#main")).to_contain_text("that match among")  # the filtered view is in
    expect(page.locator("#dead-letters tbody tr")).to_have_count(1)
    expect(page.locator("#dead-letters tbody tr")).to_contain_text("ui-not-json")
    page.fill("form.filters input[name=key]", "ui-no-such-request")
    page.click("form.filters button")
    expect(page.locator("#dead-letters tbody")).to_contain_text("Nothing refused")

    # Refused before a time: none before the stack began; all of them before an hour from now.
    page.fill("form.filters input[name=key]", "")
    page.fill("form.filters input[name=before]", "2020-01-01T00:00")
    page.click("form.filters button")
    expect(page.locator("#main")).to_contain_text("written before 2020-01-01T00:00 UTC")
    expect(page.locator("#dead-letters tbody")).to_contain_text("Nothing refused")
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    page.fill("form.filters input[name=before]", later)
    page.click("form.filters button")
    expect(page.locator("#dead-letters tbody tr", has_text="ui-not-json")).to_have_count(1)

    # A hundred refusals later it is off the first page, and one click on Older away.
    flood = [(f"{stack.topic_prefix}.job-requests", f"ui-flood-{i:03d}".encode(), b"{not json", None)
             for i in range(DLQ_LAST)]
    produce_all(make_producer({"bootstrap.servers": stack.infra.kafka_bootstrap}), flood)
    page.goto(f"{console_url}/dead-letters")
    floods = page.locator("#dead-letters tbody tr", has_text="ui-flood-")
    wait_for(lambda: _shown_after_reload(page, floods, DLQ_LAST), 60, "a page of the hundred refusals")
    expect(page.locator("#dead-letters tbody tr", has_text="ui-not-json")).to_have_count(0)
    page.click("button#older")
    expect(page.locator("#main")).to_contain_text("older than the page before")
    expect(page.locator("#dead-letters tbody tr", has_text="ui-not-json")).to_have_count(1)
    expect(page.locator("#dead-letters tbody tr", has_text=f"ui-flood-{DLQ_LAST - 1:03d}")).to_have_count(0)
    shot(page, "dead-letters-older")


def test_an_operator_sees_a_guid_the_gateway_rate_limits_slowed_and_by_how_much(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    """The gateway takes this guid's sends at most every 1.5 s; Pacer's interval is 150 ms: the
    sender slows the guid until its sends are far enough apart, writes the penalty to the guid's
    lease row, and the Guids page shows the guid slowed, by how much, not stalled."""
    guid = f"ui-slow-{uuid.uuid4().hex[:6]}"
    knobs = httpx.get(f"{stack.gateway_url}/_admin/config", timeout=5).json()
    httpx.put(f"{stack.gateway_url}/_admin/config", timeout=5,
              json={"guid_min_interval_ms": {**knobs["guid_min_interval_ms"], guid: 1500}}).raise_for_status()
    with cancelled_after(stack, tokens, publish_job(stack, 30, (guid,))):
        wait_for(lambda: sql(stack, "SELECT penalty FROM guid_leases WHERE guid = %s AND penalty > 1", guid), 60,
                 "the guid's penalty on its lease row")
        activity = guid_health(page, console_url, tokens["operator"], guid)
        expect(activity.locator(".status")).to_have_text("slowed")
        expect(activity).to_contain_text("×")
        shot(page, "guids-slowed")
        assert float(activity.locator("small.penalty").inner_text().lstrip("×")) > 1


def test_an_operator_sees_a_guid_keeping_the_quiet_its_gateway_asked_for_and_when_it_ends(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    """A sender answered ``Retry-After: 1800`` left the quiet on the guid's lease row and died.
    The sender taking the guid's new work resumes it with the rest of the quiet: no call, and
    the Guids page shows the guid slowed, with when the quiet ends, not stalled."""
    guid = f"ui-hush-{uuid.uuid4().hex[:6]}"
    sql(stack, "INSERT INTO guid_leases (guid, gateway_quiet_until) VALUES (%s, now() + interval '30 minutes')", guid)
    with cancelled_after(stack, tokens, publish_job(stack, 3, (guid,))):
        wait_for(lambda: sql(stack, "SELECT 1 FROM guid_leases WHERE guid = %s AND owner IS NOT NULL", guid), 60,
                 "a sender holding the guid")
        activity = guid_health(page, console_url, tokens["operator"], guid)
        expect(activity.locator(".status")).to_have_text("slowed")
        expect(activity.locator(".gateway-quiet")).to_have_text(
            re.compile(r"quiet asked by the gateway, ends in (28|29|30) min"))
        shot(page, "guids-gateway-quiet")
        sent = httpx.get(f"{stack.gateway_url}/_admin/sends", params={"guid": guid}, timeout=5).json()["total"]
        assert sent == 0, f"the guid was sent to inside the quiet its row keeps: {sent}"


def test_on_a_phone_s_width_the_bar_stays_readable_and_only_tables_scroll_sideways(
        stack: Stack, console_url: str, tokens: dict[str, str], page: Page) -> None:
    """At 390 px, on every page an admin has: the page is no wider than the screen (a wide table
    scrolls inside it) and each link of the bar, Sign out included, lies on the dark bar. A job
    page that cannot be read says why where its content would be, not "Loading…"."""
    with cancelled_after(stack, tokens, publish_job(stack, 3, ("ui-phone-a", "ui-phone-b"))) as job:
        page.set_viewport_size({"width": 390, "height": 844})
        login(page, console_url, tokens["admin"])
        for name in ("jobs", f"jobs/{job}", "guids", "locks", "in-doubt", "dead-letters", "audit"):
            page.goto(f"{console_url}/{name}")
            expect(page.locator("#main h1")).to_be_visible()
            if name.startswith("jobs/"):
                expect(page.locator("#shards")).to_be_visible()  # the widest table, loaded apart
            shot(page, "phone-job" if "/" in name else f"phone-{name}")
            wide = page.evaluate("document.documentElement.scrollWidth")
            assert wide <= 390, f"{name}: the page is {wide} px wide on a 390 px screen"
            bar = page.locator("header").bounding_box()
            assert bar is not None
            for link in page.locator("header nav a, header nav button").all():
                box = link.bounding_box()
                assert box is not None and bar["x"] <= box["x"] and box["x"] + box["width"] <= bar["x"] + bar["width"] \
                    and bar["y"] <= box["y"] and box["y"] + box["height"] <= bar["y"] + bar["height"], (
                        f"{name}: {link.inner_text()!r} at {box} is off the bar {bar}")
        page.goto(f"{console_url}/jobs/{uuid.uuid4()}")
        expect(page.locator("#main > p.err")).to_contain_text("This page cannot be shown: no job")
        shot(page, "phone-no-such-job")
