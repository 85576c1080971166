"""The job and shard state machines: what each action may do from each status.

The actions are taken by stored functions under the row's lock (``pacer_job_action``,
``pacer_hold_job``, ``pacer_await_approval``, ``pacer_shard_action`` in ``db/schema/functions/``);
these tables say what they do, and ``tests/integration/test_job_status_sql.py`` runs every
(status, action) pair against Postgres to keep the two equal, as ``item_transitions`` is kept equal to
:data:`pacer_common.domain.status.TRANSITIONS`.

Each table maps, per action, a status to the statuses the action may leave it in:

* absent: the action is refused (``conflict``) and nothing changes;
* only the status itself: nothing to do (``noop``);
* anything else: ``done``, into one of them (``resume`` completes a job with nothing left
  open instead of running it).

A status change the table allows may still be refused by a guard that is not about status:
a terminated job resumes only once none of its items is in flight or in doubt, a job whose
budget is used up only once an admin confirmed a larger one, and a job an admin has approved
is never held for approval again. Besides the actions, the reconciler's progress moves jobs
and shards between ``running`` and ``completed`` as their items open and close
(``refresh_jobs.sql``, ``refresh_shards.sql``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, TypeVar


class JobStatus(StrEnum):
    """Mirrors the CHECK constraint on ``jobs.status``."""

    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    TERMINATED = "terminated"
    AWAITING_APPROVAL = "awaiting_approval"  # held by the planner's approval policy until an admin decides


class JobAction(StrEnum):
    PAUSE = "pause"          # operator: no new claims; items in flight finish
    RESUME = "resume"        # operator: back to running (held items are released)
    CANCEL = "cancel"        # operator: pending and waiting items abandoned; irreversible
    TERMINATE = "terminate"  # operator: no new claims; resumable once in-flight items are settled
    HOLD = "hold"            # the system (budget used up, target paging failed): pause a running job
    # the system (a requery job's pages brought more items than the approval size): hold a
    # running job for an admin's approval
    AWAIT_APPROVAL = "await_approval"


class ShardStatus(StrEnum):
    """Mirrors the CHECK constraint on ``shards.status``."""

    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"


class ShardAction(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"


J = JobStatus
Sh = ShardStatus

JOB_ACTIONS: dict[JobAction, dict[JobStatus, frozenset[JobStatus]]] = {
    JobAction.PAUSE: {J.RUNNING: frozenset({J.PAUSED}), J.PAUSED: frozenset({J.PAUSED})},
    JobAction.RESUME: {
        J.PAUSED: frozenset({J.RUNNING, J.COMPLETED}),
        J.TERMINATED: frozenset({J.RUNNING, J.COMPLETED}),
        J.RUNNING: frozenset({J.RUNNING}),
    },
    JobAction.CANCEL: {
        J.RUNNING: frozenset({J.CANCELLED}),
        J.AWAITING_APPROVAL: frozenset({J.CANCELLED}),
        J.PAUSED: frozenset({J.CANCELLED}),
        J.TERMINATED: frozenset({J.CANCELLED}),
        J.CANCELLED: frozenset({J.CANCELLED}),
    },
    JobAction.TERMINATE: {
        J.RUNNING: frozenset({J.TERMINATED}),
        J.PAUSED: frozenset({J.TERMINATED}),
        J.TERMINATED: frozenset({J.TERMINATED}),
    },
    # never refused: a job that is not running is left as it is
    JobAction.HOLD: {s: frozenset({J.PAUSED if s is J.RUNNING else s}) for s in J},
    # never refused either: only a running job is held for approval
    JobAction.AWAIT_APPROVAL: {s: frozenset({J.AWAITING_APPROVAL if s is J.RUNNING else s}) for s in J},
}

# The one action that answers done without moving the job: a cancel of a cancelled job that
# abandons items come back to waiting since the cancel (a send then in flight, retried or
# proved not delivered). With none left, noop.
CANCEL_LEFT_OVER = (JobAction.CANCEL, J.CANCELLED)

SHARD_ACTIONS: dict[ShardAction, dict[ShardStatus, frozenset[ShardStatus]]] = {
    ShardAction.PAUSE: {
        Sh.PENDING: frozenset({Sh.PAUSED}),
        Sh.RUNNING: frozenset({Sh.PAUSED}),
        Sh.PAUSED: frozenset({Sh.PAUSED}),
    },
    # a shard that is not paused has nothing to resume, whatever its status; a paused one with
    # nothing left open (its items expired meanwhile) completes
    ShardAction.RESUME: {s: frozenset({Sh.RUNNING, Sh.COMPLETED} if s is Sh.PAUSED else {s}) for s in Sh},
}

Outcome = Literal["done", "noop", "conflict"]
Status = TypeVar("Status", JobStatus, ShardStatus)


def outcome(table: dict[Status, frozenset[Status]], status: Status) -> Outcome:
    """What an action whose table is ``table`` answers for a row in ``status``."""
    targets = table.get(status)
    if targets is None:
        return "conflict"
    return "noop" if targets == {status} else "done"
