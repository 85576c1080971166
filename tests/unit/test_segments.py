"""The segment balancing rule: every segment gets exactly one owner, and once every replica has
had a round none holds more than ceil(n / replicas), however replicas come and go."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_reconciler.domain.segments import Plan, balance, fair_share, segment_names


def _settle(n: int, owners: dict[int, int], replicas: list[int], order: list[int]) -> dict[int, int]:
    """Replicas take rounds in ``order`` (repeated) until no round changes anything."""
    for _ in range(4 * n + 8):
        changed = False
        for r in order + replicas:
            if r not in replicas:
                continue
            mine = {s for s, o in owners.items() if o == r}
            taken = {s for s, o in owners.items() if o != r}
            plan = balance(n, mine, taken, len(replicas))
            assert not (plan.claim and plan.release)
            assert not set(plan.claim) & taken, "never claims a segment another replica holds"
            for s in plan.release:
                del owners[s]
            for s in plan.claim:
                owners[s] = r
            changed |= bool(plan.claim or plan.release)
            assert len({s for s, o in owners.items() if o == r}) <= max(len(mine), fair_share(n, len(replicas)))
        if not changed:
            return owners
    raise AssertionError("did not settle")


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 64), first=st.integers(1, 8), later=st.integers(1, 8),
       order=st.lists(st.integers(0, 15), max_size=20))
def test_every_segment_gets_one_owner_and_shares_stay_fair_as_replicas_come_and_go(
        n: int, first: int, later: int, order: list[int]) -> None:
    owners: dict[int, int] = {}
    for replicas in (list(range(first)), list(range(later + 8, later + 8 + later)), list(range(first))):
        # replicas that left hold nothing any more (their leases ran out)
        owners = {s: o for s, o in owners.items() if o in replicas}
        owners = _settle(n, owners, replicas, order)
        assert sorted(owners) == list(range(n)), "every segment has an owner"
        counts = [sum(1 for o in owners.values() if o == r) for r in replicas]
        assert max(counts) <= math.ceil(n / len(replicas))


def test_a_new_replica_gets_the_surplus_and_segment_0_stays_put() -> None:
    n = 16
    assert balance(n, set(range(16)), set(), 1) == Plan()
    plan = balance(n, set(range(16)), set(), 2)  # a peer appeared with none
    assert plan.release == tuple(range(15, 7, -1)) and 0 not in plan.release
    assert balance(n, set(), set(range(8)), 2) == Plan(claim=tuple(range(8, 16)))


def test_more_replicas_than_segments_leaves_the_rest_standing_by() -> None:
    assert balance(2, set(), {0, 1}, 3) == Plan()
    assert balance(2, {1}, {0}, 3) == Plan()


def test_names_carry_the_layout() -> None:
    assert segment_names("r", 2) == {0: "r/0of2", 1: "r/1of2"}
