"""Hot limits: per guid, '*' for all, and per job (row ``job:<id>``), applied on refresh."""

from __future__ import annotations

import asyncio
from datetime import time

from pacer_common.domain.limits import parse_limits
from pacer_sender.domain.pacing import Limits
from pacer_sender.limits import LimitsBook
from tests.unit.fakes import InMemoryLimitsSource


def test_guid_job_and_default_overrides_apply_from_the_next_refresh() -> None:
    rows, woken = InMemoryLimitsSource(), list[str]()
    book = LimitsBook(Limits(min_interval_s=1.0), rows, on_change=woken.extend)
    assert book("g1").min_interval_s == 1.0 and book.job_interval("j1") is None
    rows.set("g1", {"min_interval_s": 5})
    rows.set("job:j1", {"min_interval_s": 30})
    rows.set("*", {"jitter_s": 0.1})
    assert book("g1").min_interval_s == 1.0  # nothing until the refresh
    assert asyncio.run(book.refresh()) == 3
    assert book("g1").min_interval_s == 5 and book("g1").jitter_s == 0.1
    assert book("g2").min_interval_s == 1.0 and book("g2").jitter_s == 0.1
    assert book.job_interval("j1") == 30.0 and book.job_interval("j2") is None
    assert woken == ["g1", "job:j1", "*"]
    rows.set("job:j1", {})  # the job's own rate removed
    asyncio.run(book.refresh())
    assert book.job_interval("j1") is None


def test_a_stored_row_is_read_back_as_written_and_a_row_out_of_bounds_is_ignored() -> None:
    rows = InMemoryLimitsSource()
    book = LimitsBook(Limits(min_interval_s=1.0), rows)
    rows.set("g1", parse_limits({"quiet_hours": "22:00-08:00", "per_hour": 300}))
    rows.set("g2", {"online_reserve": 1.5, "min_interval_s": 9})  # written around the API's checks
    asyncio.run(book.refresh())
    assert book("g1").quiet_hours == (time(22), time(8)) and book("g1").per_hour == 300
    assert book("g2") == book("g3") == Limits(min_interval_s=1.0)  # the whole bad row is ignored
