"""Sub-shards of very long guids: how many, which target goes where, and that it never moves."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from pacer_common.domain.ids import ToId
from pacer_common.domain.requests import JobRequest
from pacer_planner.domain.planning import plan
from pacer_planner.domain.sharding import sub_count, sub_of, target_hash

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def request(targets: list[tuple[str, str]]) -> JobRequest:
    return JobRequest.model_validate({
        "request_id": "r-1", "kind": "campaign", "created_by": "t", "message": {"content": "hi"},
        "targets": {"mode": "snapshot", "items": [{"guid": g, "to_id": t} for g, t in targets]},
    })


@pytest.mark.parametrize(("to_id", "expected"), [
    ("room-1", 3203663878), ("g-001", 362543354), ("客户-7", 984438628), ("", 0)])
def test_the_hash_is_crc32_of_utf8_and_never_changes(to_id: str, expected: int) -> None:
    # Pinned values: a requery job keeps adding items by this hash across planner releases.
    assert target_hash(ToId(to_id)) == expected


def test_the_hash_is_the_same_in_another_process() -> None:
    # Python's own hash() of a str is salted per process; this one must not be.
    code = "from pacer_planner.domain.sharding import target_hash; print(target_hash('room-42'))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "random"}).stdout
    assert int(out) == target_hash(ToId("room-42"))


@pytest.mark.parametrize(("n", "max_items", "subs"), [
    (0, 5, 1), (1, 5, 1), (5, 5, 1), (6, 5, 2), (10, 5, 2), (11, 5, 3), (50_001, 50_000, 2)])
def test_sub_count_is_ceil_n_over_max_and_at_least_one(n: int, max_items: int, subs: int) -> None:
    assert sub_count(n, max_items) == subs


def test_sub_count_refuses_a_max_below_one() -> None:
    with pytest.raises(ValueError):
        sub_count(3, 0)


def test_one_sub_puts_everything_in_sub_zero() -> None:
    assert {sub_of(ToId(f"r{i}"), 1) for i in range(100)} == {0}


def test_subs_are_the_hash_modulo_the_count() -> None:
    assert all(sub_of(ToId(f"r{i}"), 7) == target_hash(ToId(f"r{i}")) % 7 for i in range(100))


def test_a_long_guid_is_split_into_ceil_n_over_max_shards_with_every_item_once() -> None:
    targets = [("g-long", f"r{i}") for i in range(23)] + [("g-short", f"s{i}") for i in range(4)]
    p = plan(request(targets), NOW, max_shard_items=5)
    assert p.subs == {"g-long": 5, "g-short": 1}
    assert {k for k in p.shards if k[0] == "g-long"} == {("g-long", s) for s in range(5)}
    assert p.shards[("g-short", 0)] == 4
    assert sum(p.shards.values()) == len(p.items) == 27
    assert p.per_guid == {"g-long": 23, "g-short": 4}
    for it in p.items:
        assert it.sub == sub_of(it.to_id, p.subs[it.guid])
    counted: dict[Any, int] = {}
    for it in p.items:
        counted[it.shard] = counted.get(it.shard, 0) + 1
    assert counted == p.shards


def test_the_split_is_the_same_every_time_the_request_is_planned() -> None:
    targets = [("g", f"r{i}") for i in range(40)]
    a = plan(request(targets), NOW, max_shard_items=10)
    b = plan(request(list(reversed(targets))), NOW, max_shard_items=10)
    assert {(i.to_id, i.sub) for i in a.items} == {(i.to_id, i.sub) for i in b.items}


def test_a_guid_at_the_limit_is_not_split() -> None:
    p = plan(request([("g", f"r{i}") for i in range(10)]), NOW, max_shard_items=10)
    assert p.shards == {("g", 0): 10}
