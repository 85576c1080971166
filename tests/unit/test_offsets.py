"""Which offset is safe to commit while items of a partition finish out of order."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_sender.domain.offsets import PartitionOffsets


def test_nothing_seen_means_nothing_to_commit() -> None:
    book = PartitionOffsets()
    assert book.commit_point() is None
    assert len(book) == 0


def test_an_unfinished_offset_is_the_commit_point() -> None:
    book = PartitionOffsets()
    book.add(42)
    assert book.commit_point() == 42  # committing 42 means "read 42 again": it is not done


def test_finished_offset_moves_the_commit_point_past_it() -> None:
    book = PartitionOffsets()
    book.add(42)
    book.done(42)
    assert book.commit_point() == 43
    assert len(book) == 0


def test_out_of_order_completion_holds_the_commit_point_at_the_lowest_unfinished() -> None:
    book = PartitionOffsets()
    for off in (10, 11, 12, 13):
        book.add(off)
    book.done(12)
    assert book.commit_point() == 10
    book.done(13)
    assert book.commit_point() == 10
    book.done(10)
    assert book.commit_point() == 11
    book.done(11)
    assert book.commit_point() == 14


def test_all_done_commits_one_past_the_highest_seen_even_with_gaps() -> None:
    book = PartitionOffsets()
    for off in (5, 9, 7):  # a compacted topic skips offsets
        book.add(off)
    for off in (9, 5, 7):
        book.done(off)
    assert book.commit_point() == 10


def test_commit_point_keeps_advancing_as_new_offsets_arrive() -> None:
    book = PartitionOffsets()
    book.add(0)
    book.done(0)
    assert book.commit_point() == 1
    book.add(1)
    assert book.commit_point() == 1
    book.add(2)
    book.done(2)
    assert book.commit_point() == 1
    book.done(1)
    assert book.commit_point() == 3


def test_committed_starts_unset() -> None:
    assert PartitionOffsets().committed == -1


def test_len_counts_offsets_the_commit_point_has_not_passed() -> None:
    book = PartitionOffsets()
    for off in (1, 2, 3):
        book.add(off)
    book.done(3)  # finished, but held behind 1 and 2
    assert len(book) == 3
    book.done(1)
    assert len(book) == 2
    book.done(2)
    assert len(book) == 0


def check_invariant(book: PartitionOffsets, seen: set[int], unfinished: set[int]) -> None:
    cp = book.commit_point()
    if not seen:
        assert cp is None
    elif unfinished:
        assert cp == min(unfinished)  # never past the lowest unfinished offset, never behind it
    else:
        assert cp == max(seen) + 1
    assert len(book) == (len([o for o in seen if o >= cp]) if unfinished else 0)


@settings(database=None, max_examples=300, deadline=None)
@given(
    offsets=st.lists(st.integers(0, 10_000), min_size=1, max_size=60, unique=True).map(sorted),
    data=st.data(),
)
def test_any_completion_order_never_commits_past_an_unfinished_offset(offsets: list[int], data: st.DataObject) -> None:
    book = PartitionOffsets()
    for off in offsets:
        book.add(off)
    unfinished = set(offsets)
    order = data.draw(st.permutations(offsets))
    for off in order:
        book.done(off)
        unfinished.discard(off)
        check_invariant(book, set(offsets), unfinished)


@settings(database=None, max_examples=300, deadline=None)
@given(script=st.lists(st.booleans(), max_size=120), seed=st.integers(0, 2**32 - 1))
def test_interleaved_arrivals_and_completions_keep_the_invariant(script: list[bool], seed: int) -> None:
    """Offsets arrive in increasing order (as Kafka hands them out) while any in-hand one finishes."""
    rng = random.Random(seed)
    book = PartitionOffsets()
    seen: set[int] = set()
    unfinished: set[int] = set()
    next_offset = rng.randint(0, 100)
    check_invariant(book, seen, unfinished)
    for arrive in script:
        if arrive or not unfinished:
            book.add(next_offset)
            seen.add(next_offset)
            unfinished.add(next_offset)
            next_offset += rng.randint(1, 3)
        else:
            off = rng.choice(sorted(unfinished))
            book.done(off)
            unfinished.discard(off)
        check_invariant(book, seen, unfinished)
