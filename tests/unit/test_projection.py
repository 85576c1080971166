"""Projecting event batches into per-shard counts, and finding items to re-dispatch."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_common.domain.events import ItemEvent
from pacer_common.domain.status import TRANSITIONS, ItemStatus
from pacer_reconciler.domain.projection import count_deltas, to_dispatch

S = ItemStatus
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def ev(item_id: str, src: ItemStatus, dst: ItemStatus, shard_id: int = 1, version: int = 1) -> ItemEvent:
    return ItemEvent(seq=version, type="ItemClaimed", item_id=item_id, job_id="j", shard_id=shard_id,
                     guid="g", version=version, from_status=src, to_status=dst, occurred_at=T0, payload={})


def test_empty_batch_changes_nothing() -> None:
    assert count_deltas([]) == {}
    assert to_dispatch([]) == []


def test_counts_come_in_key_order_whatever_the_events_order() -> None:
    """The counts' rows are written, and locked, in the order count_deltas gives: shard, then
    status, as a retry takes them, so the two never wait for each other in a circle."""
    batch = [ev("a", S.PENDING, S.CLAIMED, shard_id=9), ev("b", S.SUBMITTED, S.CONFIRMED, shard_id=2),
             ev("c", S.PENDING, S.CLAIMED, shard_id=5), ev("d", S.CLAIMED, S.SUBMITTED, shard_id=2)]
    keys = list(count_deltas(batch))
    assert keys == sorted(keys) and {k[0] for k in keys} == {2, 5, 9}


def test_one_transition_moves_one_item_between_counts() -> None:
    assert count_deltas([ev("a", S.PENDING, S.CLAIMED, shard_id=7)]) == {(7, S.PENDING): -1, (7, S.CLAIMED): 1}


def test_intermediate_statuses_cancel_out_within_a_batch() -> None:
    batch = [
        ev("a", S.PENDING, S.CLAIMED, version=1),
        ev("a", S.CLAIMED, S.SUBMITTED, version=2),
        ev("a", S.SUBMITTED, S.CONFIRMED, version=3),
    ]
    assert count_deltas(batch) == {(1, S.PENDING): -1, (1, S.CONFIRMED): 1}


def test_shards_are_counted_separately() -> None:
    batch = [
        ev("a", S.PENDING, S.CLAIMED, shard_id=1),
        ev("b", S.PENDING, S.CLAIMED, shard_id=2),
        ev("c", S.PENDING, S.EXPIRED, shard_id=2),
    ]
    assert count_deltas(batch) == {
        (1, S.PENDING): -1, (1, S.CLAIMED): 1,
        (2, S.PENDING): -2, (2, S.CLAIMED): 1, (2, S.EXPIRED): 1,
    }


def random_history(
    rng: random.Random, n_items: int, n_shards: int, max_steps: int,
) -> tuple[list[ItemEvent], dict[str, tuple[int, ItemStatus]]]:
    """Random legal walks over the transition table, interleaved into one batch."""
    walks: list[list[ItemEvent]] = []
    final: dict[str, tuple[int, ItemStatus]] = {}
    for i in range(n_items):
        item, shard, status = f"it-{i}", rng.randrange(n_shards), S.PENDING
        walk = []
        for version in range(1, rng.randint(0, max_steps) + 1):
            nxt = sorted(TRANSITIONS[status])
            if not nxt:
                break
            dst = rng.choice(nxt)
            walk.append(ev(item, status, dst, shard, version))
            status = dst
        walks.append(walk)
        final[item] = (shard, status)
    batch: list[ItemEvent] = []
    while any(walks):
        w = rng.choice([w for w in walks if w])
        batch.append(w.pop(0))
    return batch, final


@settings(database=None, max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_items=st.integers(1, 25), n_shards=st.integers(1, 4))
def test_counts_are_conserved_per_shard_and_match_a_recount(seed: int, n_items: int, n_shards: int) -> None:
    batch, final = random_history(random.Random(seed), n_items, n_shards, max_steps=8)
    deltas = count_deltas(batch)
    per_shard: Counter[int] = Counter()
    for (shard, _), v in deltas.items():
        per_shard[shard] += v
    assert all(v == 0 for v in per_shard.values())
    assert 0 not in deltas.values()
    # Starting with every item pending, applying the deltas gives the real final counts.
    counts: Counter[tuple[int, ItemStatus]] = Counter((shard, S.PENDING) for shard, _ in final.values())
    counts.update(deltas)
    assert +counts == Counter(final.values())


def test_to_dispatch_lists_only_items_moved_to_pending() -> None:
    batch = [
        ev("a", S.RECOVERY_PENDING, S.PENDING),
        ev("b", S.PENDING, S.CLAIMED),
        ev("c", S.WAITING_RETRY, S.PENDING),
        ev("d", S.SUBMITTED, S.RECOVERY_PENDING),
        ev("e", S.CLAIMED, S.PENDING),
    ]
    assert to_dispatch(batch) == ["a", "c", "e"]


def test_to_dispatch_deduplicates_and_keeps_first_appearance_order() -> None:
    batch = [
        ev("z", S.WAITING_RETRY, S.PENDING, version=1),
        ev("a", S.CLAIMED, S.PENDING, version=1),
        ev("z", S.PENDING, S.CLAIMED, version=2),
        ev("z", S.CLAIMED, S.PENDING, version=3),
        ev("m", S.RECOVERY_PENDING, S.PENDING, version=1),
        ev("a", S.PENDING, S.CLAIMED, version=2),
        ev("a", S.CLAIMED, S.PENDING, version=3),
    ]
    assert to_dispatch(batch) == ["z", "a", "m"]


def test_to_dispatch_accepts_a_one_shot_iterable() -> None:
    assert to_dispatch(iter([ev("a", S.CLAIMED, S.PENDING)])) == ["a"]
    assert count_deltas(iter([ev("a", S.CLAIMED, S.PENDING)])) == {(1, S.CLAIMED): -1, (1, S.PENDING): 1}
