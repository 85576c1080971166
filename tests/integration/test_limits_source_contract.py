"""The hot limits' source (``LimitsSource``), run against the in-memory fake the unit tests
use and the Postgres adapter the sender runs: every row once, in change order, and after a
cursor only what changed since. (A change committed after a later-stamped one is the
database's own case: ``test_control_fencing.py``.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pacer_common.db.pool import open_pool
from pacer_sender.adapters.postgres import PostgresLimitsSource
from pacer_sender.limits import LimitsSource
from tests.integration.helpers import contract
from tests.unit.fakes import InMemoryLimitsSource


@dataclass
class Subject:
    source: LimitsSource
    write: Callable[[str, dict[str, Any]], None]  # one committed change of a row


@asynccontextmanager
async def memory() -> AsyncIterator[Subject]:
    fake = InMemoryLimitsSource()
    yield Subject(fake, fake.set)


@asynccontextmanager
async def postgres(url: str) -> AsyncIterator[Subject]:
    pool = await open_pool(url, min_size=1, max_size=2)

    def write(key: str, limits: dict[str, Any]) -> None:
        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 't')"
                         " ON CONFLICT (guid) DO UPDATE SET limits = EXCLUDED.limits", (key, Jsonb(limits)))

    try:
        yield Subject(PostgresLimitsSource(pool), write)
    finally:
        await pool.close()


Scenario = Callable[[Subject], Awaitable[None]]


@pytest.fixture(params=["memory", "postgres"])
def run(request: pytest.FixtureRequest) -> Callable[[Scenario], None]:
    """Run a scenario against one implementation of the port."""
    return contract(request, memory, postgres)


def test_every_row_once_in_change_order_then_only_what_changed_since(run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        assert await s.source.changed_since(None) == []
        s.write("g1", {"min_interval_s": 5})
        s.write("*", {"jitter_s": 0.1})
        s.write("job:j1", {"weight": 3})
        first = await s.source.changed_since(None)
        assert [(key, limits) for key, limits, _ in first] == [
            ("g1", {"min_interval_s": 5}), ("*", {"jitter_s": 0.1}), ("job:j1", {"weight": 3})]
        cursors = [cursor for _, _, cursor in first]
        assert cursors == sorted(set(cursors)), "cursors grow with each change"
        assert await s.source.changed_since(cursors[-1]) == []
        s.write("g1", {"min_interval_s": 8})  # a row changed again comes again, once, with its new value
        again = await s.source.changed_since(cursors[-1])
        assert [(key, limits) for key, limits, _ in again] == [("g1", {"min_interval_s": 8})]
        assert again[0][2] > cursors[-1]
        assert [key for key, _, _ in await s.source.changed_since(None)] == ["*", "job:j1", "g1"]

    run(scenario)
