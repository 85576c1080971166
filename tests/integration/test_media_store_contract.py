"""The media part of the sender's action store (``ActionStore``), run against the in-memory
fake the unit tests use and the Postgres adapter: a record per (guid, hash of url, kind and
file name); a refused send makes only the refused mediaId's record stale, and the next upload
replaces it; a mediaId is the guid's once, so an upload answered with a mediaId another record
of the guid holds supersedes that record; whether an item was sent back for its media is read
from its own events."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from pacer_common.db.pool import open_pool
from pacer_common.domain.failures import FailureClass, SendError
from pacer_common.domain.requests import MediaMessage
from pacer_common.domain.status import ItemStatus as S
from pacer_common.gateway import MediaAnswer
from pacer_sender.adapters.actions import PostgresActions
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.domain.decisions import Decision
from pacer_sender.domain.media import after_media_refusal, media_hash
from pacer_sender.ports import ActionStore, ItemRepository
from tests.integration.helpers import cmd, contract, seed_job
from tests.unit.fakes import InMemoryActions, InMemoryItemRepository

URL = "https://cdn.example/x.pdf"
FAILED = Decision(S.FAILED, "ItemFailed", "bad_params", "40001", release_ledger=True)
RETRY = Decision(S.WAITING_RETRY, "ItemRetryScheduled", "retryable", "busy", release_ledger=True)


@dataclass
class Subject:
    store: ActionStore
    repo: ItemRepository
    items: list[str]  # pending items of guid g1, whose lease sender w1 holds


@asynccontextmanager
async def memory(n: int) -> AsyncIterator[Subject]:
    repo = InMemoryItemRepository()
    items = [str(uuid.uuid4()) for _ in range(n)]
    for i in items:
        repo.add(i)
    yield Subject(InMemoryActions(repo), repo, items)


@asynccontextmanager
async def postgres(url: str, n: int) -> AsyncIterator[Subject]:
    _, _, items = seed_job(url, {"g1": n})
    pool = await open_pool(url, min_size=1, max_size=4)
    await PostgresGuidLeases(pool, timedelta(seconds=30)).acquire(["g1"], "w1")
    try:
        yield Subject(PostgresActions(pool), PostgresItemRepository(pool, timedelta(seconds=30)), items)
    finally:
        await pool.close()


Scenario = Callable[[Subject], Awaitable[None]]


@pytest.fixture(params=["memory", "postgres"])
def run(request: pytest.FixtureRequest) -> Callable[[int, Scenario], None]:
    """Run a scenario, with ``n`` pending items, against one implementation of the port."""
    return contract(request, memory, postgres)


def test_one_url_under_two_file_names_is_two_records(run: Callable[[int, Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        a, b = MediaMessage(type="file", url=URL, fileName="Q3.pdf"), MediaMessage(type="file", url=URL,
                                                                                   fileName="Q3-final.pdf")
        ha, hb = (media_hash(m.url, m.type, m.fileName) for m in (a, b))
        await s.store.uploaded("g1", ha, a, MediaAnswer("m-a", "ready", None, 0.0), 0)
        assert await s.store.media("g1", hb) is None
        await s.store.uploaded("g1", hb, b, MediaAnswer("m-b", "ready", None, 0.0), 0)
        ra, rb = await s.store.media("g1", ha), await s.store.media("g1", hb)
        assert ra is not None and rb is not None and (ra.media_id, rb.media_id) == ("m-a", "m-b")

    run(0, scenario)


def test_a_refusal_makes_only_its_own_media_stale_and_the_next_upload_replaces_it(
        run: Callable[[int, Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        msg = MediaMessage(type="image", url="https://cdn.example/p.png")
        h = media_hash(msg.url, msg.type, msg.fileName)
        await s.store.uploaded("g1", h, msg, MediaAnswer("m-old", "ready", None, 0.0), 0)
        await s.store.uploaded("g1", h, msg, MediaAnswer("m-new", "ready", None, 0.0), 1)
        assert await s.store.media_refused("g1", h, "m-old", "late refusal") is False
        row = await s.store.media("g1", h)
        assert row is not None and (row.media_id, row.status) == ("m-new", "ready"), "uploaded again: untouched"
        assert await s.store.media_refused("g1", h, "m-new", "40001: no media m-new") is True
        row = await s.store.media("g1", h)
        assert row is not None and (row.media_id, row.status, row.reason, row.generation) == (
            "m-new", "stale", "40001: no media m-new", 1)
        # A poll's late answer leaves a stale record stale.
        late = await s.store.checked("g1", h, "m-new", "ready", None)
        assert late is not None and late.status == "stale"
        again = await s.store.uploaded("g1", h, msg, MediaAnswer("m-2", "pending", None, 0.0), 2)
        assert (again.media_id, again.status, again.reason, again.generation) == ("m-2", "pending", None, 2)

    run(0, scenario)


def test_an_upload_answered_with_a_media_id_an_old_record_holds_supersedes_that_record(
        run: Callable[[int, Scenario], None]) -> None:
    # A gateway that deduplicates by url answers the mediaId of the upload made before migration
    # 0047, whose record is keyed by the url-only hash (and media_by_id is unique per guid).
    async def scenario(s: Subject) -> None:
        msg = MediaMessage(type="image", url="https://cdn.example/p.png")
        old, new = hashlib.sha256(msg.url.encode()).hexdigest(), media_hash(msg.url, msg.type, msg.fileName)
        await s.store.uploaded("g1", old, msg, MediaAnswer("m-1", "ready", None, 0.0), 0)
        await s.store.uploaded("g2", old, msg, MediaAnswer("m-1", "ready", None, 0.0), 0)  # another guid's
        row = await s.store.uploaded("g1", new, msg, MediaAnswer("m-1", "ready", None, 0.0), 0)
        assert (row.media_id, row.status) == ("m-1", "ready")
        assert await s.store.media("g1", old) is None, "the old record is superseded"
        again = await s.store.media("g1", new)
        assert again is not None and again.media_id == "m-1"
        other = await s.store.media("g2", old)
        assert other is not None and other.media_id == "m-1", "another guid's record is its own"
        # An upload again of the same hash (a new generation) answered with the same mediaId replaces its own row.
        regen = await s.store.uploaded("g1", new, msg, MediaAnswer("m-1", "pending", None, 0.0), 1)
        assert (regen.media_id, regen.status, regen.generation) == ("m-1", "pending", 1)

    run(0, scenario)


def test_an_item_sent_back_for_its_media_is_known_by_its_events(run: Callable[[int, Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        back, retried = s.items
        err = SendError(FailureClass.BAD_PARAMS, 40001, "no media m-1")
        for item, decision in ((back, after_media_refusal(err, "m-1", False, FAILED, datetime.now(UTC))),
                               (retried, RETRY)):
            begun = await s.repo.begin_send(cmd(item, f"k-{item}"), "w1")
            assert begun.epoch is not None
            assert await s.repo.settle(cmd(item, f"k-{item}"), begun.epoch, decision)
        assert await s.store.sent_back_for_media(back) is True
        assert await s.store.sent_back_for_media(retried) is False, "another retry is no sending back"

    run(2, scenario)
