"""The verdict on a scenario's figures: no duplicate, no loss, every item final, and proof
that the scenario's fault really happened — a scenario that broke nothing must fail.

``make chaos`` and the short suite (``tests/chaos``) judge by the same table; a unit test
(``tests/unit/test_chaos_evidence.py``) shows every check failing on a run without its fault.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pacer_dev.chaos.scenarios import Size
from pacer_dev.chaos.scenarios_intake import REPLIES
from pacer_dev.chaos.scenarios_reconciler import LEADER_TTL_S

Figures = Mapping[str, int]
Check = Callable[[Figures, Size], bool]

EVIDENCE: dict[str, Check] = {
    "kill-sender": lambda f, s: f["kills"] >= s.kills,
    "quiet-kills": lambda f, s: (f["kills"] >= s.kills and f["quiets_asked"] > 0 and f["guid_takeovers"] > 0
                                 and f["quiet_violations"] == 0),
    "scale": lambda f, s: f["guid_handovers"] > 0 and f["violations"] == 0 and f["max_guid_concurrency"] <= 1,
    "zombie": lambda f, s: f["guid_takeovers"] > 0 and f["max_guid_concurrency"] <= 1,
    "kafka-restart": lambda f, s: f["open_at_fault"] > 0,
    "postgres-restart": lambda f, s: f["terminated"] > 0 and f["open_at_fault"] > 0,
    "gateway-faults": lambda f, s: f["dropped"] > 0 and f["rejected"] > 0 and f["verified"] > 0,
    "double-submit": lambda f, s: f["jobs"] == 1 and f["cancelled"] > 0 and f["retried"] > 0,
    "lookup-hang": lambda f, s: (f["lookups_timed_out"] > 0 and f["lookups_delayed"] > 0
                                 and f["in_doubt_while_hung"] > 0 and f["max_tail_lag_s"] <= 10),
    "frozen-leader": lambda f, s: (f["took_over"] == 1 and f["failover_s"] <= LEADER_TTL_S + 3
                                   and f["old_stepped_down"] == 1),
    "reconciler-kills": lambda f, s: f["killed_mid_apply"] >= max(1, s.kills // 5),
    "retention-loss": lambda f, s: f["deleted"] >= s.items and f["swept"] > 0,
    "forced-release": lambda f, s: (f["forced"] > 0 and f["evicted"] > 0 and f["taken_back"] == 0
                                    and f["exited"] == 0 and f["max_guid_concurrency"] <= 1 and f["violations"] == 0),
    "callbacks": lambda f, s: (f["outs"] > 0 and f["callbacks_lost"] > 0 and f["callbacks_duplicated"] > 0
                               and f["callbacks_reordered"] > 0 and f["status_polls"] > 0
                               and f["sends_unready"] == 0 and f["still_held"] == 0),
    "guid-kicks": lambda f, s: (f["kicks"] > 0 and f["holds"] > 0 and f["resumed"] > 0 and f["still_held"] == 0
                                and f["sent_while_held"] == 0 and f["violations"] == 0),
    "requery-kills": lambda f, s: (f["killed_while_paging"] >= 1 and f["pages"] >= 2 and f["pages_broken"] == 0
                                   and f["targets_missing"] == 0),
    "planner-kills": lambda f, s: (f["killed_mid_store"] >= 1 and f["killed_before_dispatch"] >= 1
                                   and f["jobs"] == f["requests"] > 0 and f["targets_missing"] == 0
                                   and f["totals_astray"] == 0 and f["undispatched"] == 0),
    "requery-zombie": lambda f, s: (f["taken_over"] == 1 and f["zombie_pages_lost"] >= 1
                                    and f["pages"] > f["frozen_at_page"] and f["pages_broken"] == 0
                                    and f["targets_missing"] == 0),
    "poison-requests": lambda f, s: (f["dead_lettered"] == f["poisoned"] > 0 and f["jobs"] == 1 + REPLIES
                                     and f["planner_exited"] == 0),
    "restore": lambda f, s: (f["sent_since_backup"] > 0 and f["replanned_sent"] > 0
                             and f["put_in_doubt"] >= f["sent_since_backup"]
                             and f["versions_rewritten"] > 0 and f["dedupe_key_clashes"] == 0),
}


def verdict(name: str, fig: Figures, size: Size) -> list[str]:
    """What is wrong with a run of scenario ``name`` (empty: it passed)."""
    wrong = []
    if fig.get("completed", 1) != 1:
        wrong.append("not every item reached a final state")
    if fig["duplicates"]:
        wrong.append("a key was delivered twice")
    if fig["lost"]:
        wrong.append("Pacer and the gateway disagree, or an item was lost")
    if fig["unverified"]:
        wrong.append("sends were left unverified")
    if fig.get("jobs_astray"):
        wrong.append("a job's status disagrees with its items (completed with one open, or running with none)")
    if fig.get("projection_mismatch"):
        wrong.append("the reconciler's projected counts disagree with the items")
    if fig.get("deadlocks"):
        wrong.append("Postgres broke a deadlock: two paths took rows in opposite orders (see its log)")
    if not EVIDENCE[name](fig, size):
        wrong.append("no evidence the fault happened as planned, or it did harm")
    return wrong
