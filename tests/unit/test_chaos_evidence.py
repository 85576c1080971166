"""Every chaos scenario's evidence check can fail: on the figures of a run in which its fault
did not happen it fails, and on figures like those its real runs print it passes."""

from __future__ import annotations

import pytest

from pacer_dev.chaos.evidence import EVIDENCE, verdict
from pacer_dev.chaos.scenarios import SCENARIOS, Size

SIZE = Size(items=600, guids=12, kills=5, timeout_s=240)

# A clean run with no fault at all: everything delivered once, nothing went wrong, nothing broke.
QUIET = {
    "items": 600, "delivered_once": 600, "duplicates": 0, "lost": 0, "unverified": 0, "completed": 1,
    "jobs": 1, "failed": 0, "abandoned": 0, "violations": 0, "max_guid_concurrency": 1, "takeovers": 0,
    "guid_takeovers": 0, "guid_handovers": 0, "verified": 0, "intercepts": 0, "kills": 0, "open_at_fault": 0,
    "terminated": 0, "dropped": 0, "rejected": 0, "cancelled": 0, "retried": 0, "lookups_timed_out": 0,
    "lookups_delayed": 0, "in_doubt_while_hung": 0, "max_tail_lag_s": 0, "took_over": 0, "failover_s": 0,
    "old_stepped_down": 0, "projection_mismatch": 0, "deleted": 0, "swept": 0, "forced": 0, "evicted": 0,
    "taken_back": 0, "exited": 0, "poisoned": 0, "dead_lettered": 0, "planner_exited": 0,
    "kicks": 0, "holds": 0, "resumed": 0, "still_held": 0, "sent_while_held": 0,
    "outs": 0, "callbacks_lost": 0, "callbacks_duplicated": 0, "callbacks_reordered": 0, "status_polls": 0,
    "sends_unready": 0, "sent_since_backup": 0, "put_in_doubt": 0, "replanned": 0, "replanned_sent": 0,
    "versions_rewritten": 0, "dedupe_key_clashes": 0, "jobs_astray": 0, "deadlocks": 0,
    "planner_kills": 0, "killed_while_paging": 0, "pages": 0, "pages_broken": 0, "targets_missing": 0,
    "frozen_at_page": 0, "taken_over": 0, "zombie_pages_lost": 0,
    "reconciler_kills": 0, "killed_mid_apply": 0,
    "requests": 0, "killed_mid_store": 0, "killed_before_dispatch": 0, "totals_astray": 0, "undispatched": 0,
    "quiets_asked": 0, "quiet_violations": 0,
}
QUIET_JOBS = {"poison-requests": 11}  # its valid requests are jobs whether or not poison came first

# What runs with the fault print (the short forms' figures), over the quiet ones.
FAULTED = {
    "kill-sender": {"kills": 5, "takeovers": 12, "verified": 12},
    "quiet-kills": {"kills": 5, "quiets_asked": 30, "guid_takeovers": 8},
    "scale": {"guid_handovers": 14},
    "zombie": {"guid_takeovers": 9},
    "kafka-restart": {"open_at_fault": 380},
    "postgres-restart": {"terminated": 7, "open_at_fault": 300},
    "gateway-faults": {"dropped": 20, "rejected": 109, "verified": 20},
    "double-submit": {"cancelled": 12, "retried": 30},
    "lookup-hang": {"lookups_timed_out": 8, "lookups_delayed": 12, "in_doubt_while_hung": 41, "max_tail_lag_s": 1},
    "frozen-leader": {"took_over": 1, "failover_s": 5, "old_stepped_down": 1},
    "retention-loss": {"deleted": 600, "swept": 24},
    "forced-release": {"forced": 40, "evicted": 40},
    "poison-requests": {"poisoned": 22, "dead_lettered": 22, "jobs": 11},
    "guid-kicks": {"kicks": 9, "holds": 7, "resumed": 7},
    "callbacks": {"outs": 12, "callbacks_lost": 30, "callbacks_duplicated": 35, "callbacks_reordered": 33,
                  "status_polls": 20},
    "requery-kills": {"planner_kills": 2, "killed_while_paging": 2, "pages": 10},
    "reconciler-kills": {"reconciler_kills": 2, "killed_mid_apply": 1},
    "planner-kills": {"requests": 6, "jobs": 6, "planner_kills": 2, "killed_mid_store": 1,
                      "killed_before_dispatch": 1},
    "requery-zombie": {"frozen_at_page": 2, "taken_over": 1, "zombie_pages_lost": 1, "pages": 6},
    "restore": {"sent_since_backup": 40, "replanned": 300, "replanned_sent": 25, "put_in_doubt": 300,
                "verified": 300, "versions_rewritten": 180},
}


def test_every_scenario_has_an_evidence_check() -> None:
    assert set(EVIDENCE) == set(SCENARIOS) == set(FAULTED)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_run_without_its_fault_fails(name: str) -> None:
    quiet = QUIET | {"jobs": QUIET_JOBS.get(name, 1)}
    assert verdict(name, quiet, SIZE) == ["no evidence the fault happened as planned, or it did harm"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_run_with_its_fault_passes_and_a_duplicate_still_fails_it(name: str) -> None:
    faulted = QUIET | FAULTED[name]
    assert verdict(name, faulted, SIZE) == []
    assert "a key was delivered twice" in verdict(name, faulted | {"duplicates": 1}, SIZE)
    assert "not every item reached a final state" in verdict(name, faulted | {"completed": 0}, SIZE)
    assert any("job's status" in w for w in verdict(name, faulted | {"jobs_astray": 1}, SIZE))
    assert "the reconciler's projected counts disagree with the items" in verdict(
        name, faulted | {"projection_mismatch": 1}, SIZE)
    assert any("deadlock" in w for w in verdict(name, faulted | {"deadlocks": 1}, SIZE))


@pytest.mark.parametrize(("name", "broken"), [
    ("scale", {"violations": 1}), ("zombie", {"max_guid_concurrency": 2}), ("lookup-hang", {"max_tail_lag_s": 60}),
    ("frozen-leader", {"failover_s": 60}),
    ("forced-release", {"taken_back": 1}), ("poison-requests", {"planner_exited": 1}),
    ("kill-sender", {"kills": 4}), ("retention-loss", {"deleted": 10}),
    ("quiet-kills", {"quiet_violations": 1}), ("quiet-kills", {"guid_takeovers": 0}),
    ("guid-kicks", {"sent_while_held": 1}), ("guid-kicks", {"still_held": 1}),
    ("callbacks", {"sends_unready": 1}), ("callbacks", {"still_held": 1}),
    ("restore", {"put_in_doubt": 39}), ("restore", {"replanned_sent": 0}), ("restore", {"dedupe_key_clashes": 1}),
    ("restore", {"versions_rewritten": 0}),
    ("requery-kills", {"pages_broken": 1}), ("requery-kills", {"targets_missing": 1}), ("requery-kills", {"pages": 1}),
    ("reconciler-kills", {"killed_mid_apply": 0}),
    ("planner-kills", {"targets_missing": 500}), ("planner-kills", {"totals_astray": 500}),
    ("planner-kills", {"undispatched": 1}), ("planner-kills", {"jobs": 5}), ("planner-kills", {"killed_mid_store": 0}),
    ("requery-zombie", {"zombie_pages_lost": 0}), ("requery-zombie", {"pages": 2}),
    ("requery-zombie", {"pages_broken": 1}), ("requery-zombie", {"targets_missing": 1}),
])
def test_a_fault_that_did_harm_fails(name: str, broken: dict[str, int]) -> None:
    assert verdict(name, QUIET | FAULTED[name] | broken, SIZE) == ["no evidence the fault happened as planned, or it did harm"]
