"""The short form of ``make chaos``: every fault scenario, on real processes, fewer items.

Each scenario must end with every item final, no key delivered twice, and Pacer's record
agreeing with the gateway's (see ``pacer_dev.chaos.harness.Scenario.measure``).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pacer_dev.chaos.scenarios import SCENARIOS, Size
from pacer_dev.chaos.scenarios_reconciler import LEADER_TTL_S
from pacer_dev.chaos.scenarios_intake import REPLIES
from pacer_dev.infra import Infra

pytestmark = pytest.mark.chaos
SHORT = Size(items=600, guids=12, kills=5, timeout_s=240)

# What each scenario must also show, so that a scenario that broke nothing cannot pass.
EVIDENCE = {
    "kill-sender": lambda f: f["kills"] >= SHORT.kills,
    "scale": lambda f: f["violations"] == 0 and f["max_guid_concurrency"] <= 1,
    "zombie": lambda f: f["guid_takeovers"] > 0 and f["max_guid_concurrency"] <= 1,
    "kafka-restart": lambda f: f["open_at_fault"] > 0,
    "postgres-restart": lambda f: f["terminated"] > 0 and f["open_at_fault"] > 0,
    "gateway-faults": lambda f: f["dropped"] > 0 and f["rejected"] > 0 and f["verified"] > 0,
    "double-submit": lambda f: f["jobs"] == 1 and f["cancelled"] > 0 and f["retried"] > 0,
    "lookup-hang": lambda f: f["lookups_timed_out"] > 0 and f["lookups_delayed"] > 0 and f["in_doubt_while_hung"] > 0
    and f["max_tail_lag_s"] <= 10,
    "frozen-leader": lambda f: f["took_over"] == 1 and f["failover_s"] <= LEADER_TTL_S + 3
    and f["old_stepped_down"] == 1 and f["projection_mismatch"] == 0,
    "retention-loss": lambda f: f["deleted"] >= SHORT.items and f["swept"] > 0,
    "forced-release": lambda f: (f["forced"] > 0 and f["evicted"] > 0 and f["taken_back"] == 0 and f["exited"] == 0
                                 and f["max_guid_concurrency"] <= 1 and f["violations"] == 0),
    "poison-requests": lambda f: f["dead_lettered"] == f["poisoned"] > 0 and f["jobs"] == 1 + REPLIES
    and f["planner_exited"] == 0,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_no_duplicate_and_no_loss(name: str, infra_env: Infra, tmp_path: Path) -> None:
    fig, _ = SCENARIOS[name](infra_env, tmp_path, SHORT, random.Random(name))
    assert fig["completed"] == 1, f"{name}: not every item reached a final state: {fig}"
    assert fig["duplicates"] == 0, f"{name}: a key was delivered twice: {fig}"
    assert fig["lost"] == 0, f"{name}: Pacer and the gateway disagree, or an item was lost: {fig}"
    assert fig["unverified"] == 0, f"{name}: {fig}"
    assert EVIDENCE[name](fig), f"{name}: the fault did not happen as planned: {fig}"
