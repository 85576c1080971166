"""Paging back through a DLQ topic (``page_of`` and its cursor): every record a caller may see
is on some page, newest first; none twice where each partition's producers keep time in order.

The topic here is a list of records per partition and a window is read from it the way
``pacer_common.dead_letters.window`` reads the broker (the last ``depth`` offsets before each
partition's end); the real broker is read in ``tests/integration/test_control_dead_letters.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_common.domain.dead_letters import (
    TENANT_HEADER,
    Cursor,
    DeadLetter,
    Window,
    cursor_text,
    page_of,
    parse_cursor,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)
Topic = dict[int, list[DeadLetter]]


def _letter(p: int, offset: int, ms: int, tenant: str) -> DeadLetter:
    return DeadLetter(p, offset, T0 + timedelta(milliseconds=ms), f"k-{p}-{offset}".encode(), b"",
                      {TENANT_HEADER: tenant}, 0)


def _read(topic: Topic, lows: dict[int, int], depth: int, older: Cursor | None) -> Window:
    """The window ``window`` takes: up to ``depth`` offsets before each partition's end (its
    last offset, or the cursor's), never below what retention left (``lows``)."""
    letters: list[DeadLetter] = []
    starts: dict[int, int] = {}
    for p, records in topic.items():
        if older is not None and p not in older:
            continue
        high = len(records)
        end = high if older is None else min(max(older[p], lows[p]), high)
        starts[p] = max(lows[p], end - depth)
        letters += records[starts[p]:end]
    return Window(letters, starts, dict(lows))


def _all_pages(topic: Topic, lows: dict[int, int], last: int, depth: int, keep: object) -> list[list[DeadLetter]]:
    pages, older = [], None
    for _ in range(1 + sum(map(len, topic.values()))):  # each page takes one record at least
        page = page_of(_read(topic, lows, depth, older), last, keep)  # type: ignore[arg-type]
        pages.append(page.letters)
        if page.older is None:
            return pages
        assert parse_cursor(cursor_text(page.older)) == page.older
        older = page.older
    raise AssertionError("paging did not come to an end")


topics = st.lists(st.lists(st.tuples(st.integers(0, 50), st.sampled_from(["acme", "globex"])), max_size=30),
                  min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(topics, st.integers(1, 6), st.integers(0, 8), st.booleans(), st.booleans())
def test_every_record_a_caller_keeps_is_on_some_page(raw: list[list[tuple[int, str]]], last: int, extra: int,
                                                     filtered: bool, in_order: bool) -> None:
    topic: Topic = {}
    for p, records in enumerate(raw):
        # Each record's time: in offset order, or as skewed producers' clocks give it.
        times = sorted(ms for ms, _ in records) if in_order else [ms for ms, _ in records]
        topic[p] = [_letter(p, offset, ms, tenant)
                    for offset, (ms, (_, tenant)) in enumerate(zip(times, records, strict=True))]
    lows = {p: len(records) // 5 for p, records in topic.items()}  # retention took the oldest fifth

    def keep(d: DeadLetter) -> bool:
        return not filtered or d.tenant == "acme"

    # As the API reads: ``last`` per partition unfiltered, deeper when filtered.
    depth = last + extra if filtered else last
    pages = _all_pages(topic, lows, last, depth, keep)
    seen = [d for page in pages for d in page]
    held = {(d.partition, d.offset) for p, records in topic.items() for d in records[lows[p]:] if keep(d)}
    assert {(d.partition, d.offset) for d in seen} == held, "a record no page showed, or one retention took"
    assert len(seen) == len(held), "a record shown twice"
    assert all(len(page) <= last for page in pages)
    if in_order:  # newest first, page after page (with skewed clocks, each partition's own order)
        stamps = [(d.at, d.partition, d.offset) for d in seen]
        assert stamps == sorted(stamps, reverse=True), "a later page showed a newer record"


def test_a_page_stops_where_a_partition_runs_out_with_more_below() -> None:
    # Partition 0's records are all newer than partition 1's; a read of two per partition runs
    # out of partition 0 first, and what it holds below is newer than anything of partition 1.
    topic = {0: [_letter(0, o, 100 + o, "acme") for o in range(4)], 1: [_letter(1, o, o, "acme") for o in range(4)]}
    page = page_of(_read(topic, {0: 0, 1: 0}, 2, None), 3, lambda d: True)
    assert [d.where for d in page.letters] == ["0:3", "0:2"] and page.older == {0: 2, 1: 4}


def test_a_full_page_ends_where_its_partitions_still_hold_more() -> None:
    topic = {0: [_letter(0, o, 10 * o, "acme") for o in range(4)], 1: [_letter(1, o, 10 * o + 5, "acme")
                                                                        for o in range(4)]}
    page = page_of(_read(topic, {0: 0, 1: 0}, 3, None), 3, lambda d: True)
    assert [d.where for d in page.letters] == ["1:3", "0:3", "1:2"]
    # Each partition read offsets 1–3; what they hold beyond the page (0:1, 0:2 and 1:1) is
    # read again by the next page, which ends after the newest of it in each partition.
    assert page.older == {0: 3, 1: 2}
    second = page_of(_read(topic, {0: 0, 1: 0}, 3, page.older), 3, lambda d: True)
    assert [d.where for d in second.letters] == ["0:2", "1:1", "0:1"] and second.older == {0: 1, 1: 1}
    third = page_of(_read(topic, {0: 0, 1: 0}, 3, second.older), 3, lambda d: True)
    assert [d.where for d in third.letters] == ["1:0", "0:0"] and third.older is None


@pytest.mark.parametrize("text", ["", "0", "0:", ":1", "a:1", "0:1,", "0:1;1:2", "0:1,0:2", "-1:3", "0:1 "])
def test_a_cursor_that_is_not_one_is_refused_with_its_shape(text: str) -> None:
    with pytest.raises(ValueError, match="cursor"):
        parse_cursor(text)
