"""The job and shard actions in Postgres do exactly what ``domain/job_status.py`` says, for
every (status, action) pair: refused, nothing to do, or done into one of the table's statuses."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from pacer_common.domain.job_status import (
    CANCEL_LEFT_OVER,
    JOB_ACTIONS,
    SHARD_ACTIONS,
    JobAction,
    JobStatus,
    ShardAction,
    ShardStatus,
    outcome,
)
from tests.integration.helpers import seed_job


def job_in(url: str, status: JobStatus, *, open_item: bool) -> str:
    """A snapshot job in ``status`` with one item, pending (open) or confirmed (closed)."""
    job_id, _, _ = seed_job(url, {"g1": 1}, status="pending" if open_item else "confirmed")
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE jobs SET status = %s WHERE job_id = %s", (status.value, job_id))
    return job_id


def act_on_job(url: str, job_id: str, action: JobAction) -> tuple[str, JobStatus]:
    with psycopg.connect(url) as conn:
        if action is JobAction.HOLD:
            (held,) = conn.execute("SELECT pacer_hold_job(%s, 'budget_exhausted', 'system:test')", (job_id,)).fetchone()
            answer = "done" if held else "noop"
        elif action is JobAction.AWAIT_APPROVAL:
            (held,) = conn.execute("SELECT pacer_await_approval(%s, 'awaiting approval: test', 'system:test')",
                                   (job_id,)).fetchone()
            answer = "done" if held else "noop"
        else:
            (answer,) = conn.execute("SELECT outcome FROM pacer_job_action(%s, %s, 't:op', NULL)",
                                     (job_id, action.value)).fetchone()
        (after,) = conn.execute("SELECT status FROM jobs WHERE job_id = %s", (job_id,)).fetchone()
    return answer, JobStatus(after)


@pytest.mark.parametrize("action", list(JobAction))
def test_every_job_status_answers_each_action_as_the_table_says(database_url: str, action: JobAction) -> None:
    table = JOB_ACTIONS[action]
    wrong: list[Any] = []
    reached: dict[Any, Any] = {}
    for status in JobStatus:
        for open_item in (True, False):
            job_id = job_in(database_url, status, open_item=open_item)
            answer, after = act_on_job(database_url, job_id, action)
            expected = outcome(table, status)
            left_over = (action, status) == CANCEL_LEFT_OVER and open_item  # done, the job as it was
            if left_over:
                expected = "done"
            allowed = table.get(status, frozenset({status}))
            if answer != expected or after not in allowed or (expected != "done" or left_over) != (after == status):
                wrong.append(f"{action} from {status} (open item: {open_item}): {answer} → {after}, "
                             f"table says {expected} → {sorted(s.value for s in allowed)}")
            reached.setdefault(status, set()).add(after)
    assert not wrong, "\n".join(wrong)
    # every status the table allows is reached (resume: running with an item open, completed without)
    assert {s: frozenset(r) for s, r in reached.items() if s in table} == table


@pytest.mark.parametrize("action", list(ShardAction))
def test_every_shard_status_answers_each_action_as_the_table_says(database_url: str, action: ShardAction) -> None:
    table = SHARD_ACTIONS[action]
    wrong = []
    for status in ShardStatus:
        _, shards, _ = seed_job(database_url, {"g1": 1})
        with psycopg.connect(database_url) as conn:
            conn.execute("UPDATE shards SET status = %s WHERE shard_id = %s", (status.value, shards["g1"]))
            (answer,) = conn.execute("SELECT outcome FROM pacer_shard_action(%s, %s, 't:op', NULL)",
                                     (shards["g1"], action.value)).fetchone()
            (after,) = conn.execute("SELECT status FROM shards WHERE shard_id = %s", (shards["g1"],)).fetchone()
        expected = outcome(table, status)
        allowed = table.get(status, frozenset({status}))
        if answer != expected or ShardStatus(after) not in allowed:
            wrong.append(f"{action} from {status}: {answer} → {after}, "
                         f"table says {expected} → {sorted(s.value for s in allowed)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("table", "enum"), [("jobs", JobStatus), ("shards", ShardStatus)])
def test_the_status_enums_are_the_statuses_the_database_allows(database_url: str, table: str,
                                                                 enum: type[JobStatus] | type[ShardStatus]) -> None:
    with psycopg.connect(database_url) as conn:
        (check,) = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND conname = %s",
            (table, f"{table}_status_check")).fetchone()
    assert set(re.findall(r"'(\w+)'", check)) == {s.value for s in enum}
