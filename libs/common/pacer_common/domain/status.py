"""The item state machine: one table of allowed transitions.

Every status change in Pacer goes through :data:`TRANSITIONS`; the SQL in
``db/queries/transition.sql`` guards each write with the expected ``from`` statuses, so a
change that the table does not allow cannot be written.
"""

from __future__ import annotations

from enum import StrEnum


class ItemStatus(StrEnum):
    """Mirrors the Postgres ENUM ``item_status``."""

    PENDING = "pending"
    CLAIMED = "claimed"
    SUBMITTED = "submitted"
    CONFIRMED = "confirmed"
    FAILED = "failed"
    WAITING_RETRY = "waiting_retry"
    ABANDONED = "abandoned"
    EXPIRED = "expired"
    RECOVERY_PENDING = "recovery_pending"
    UNVERIFIED = "unverified"


S = ItemStatus

TRANSITIONS: dict[ItemStatus, frozenset[ItemStatus]] = {
    # claim; cancel; past expire_at at dequeue; a lifted hold re-publishes (pending → pending);
    # unsendable as it stands (bad_params, before any claim: nothing was sent); a restore
    # (→ recovery_pending: it may have been sent after the backup, so it is verified first)
    S.PENDING: frozenset({S.PENDING, S.CLAIMED, S.ABANDONED, S.EXPIRED, S.FAILED, S.RECOVERY_PENDING}),
    # "submitted" is written before the gateway call; lease lost before submit → pending
    # (nothing was sent); a duplicate intercepted by the ledger, or expiry → terminal; a restore.
    S.CLAIMED: frozenset({S.SUBMITTED, S.PENDING, S.ABANDONED, S.EXPIRED, S.RECOVERY_PENDING}),
    # the gateway answered (confirmed / failed / retryable), or the outcome is in doubt.
    S.SUBMITTED: frozenset({S.CONFIRMED, S.FAILED, S.WAITING_RETRY, S.RECOVERY_PENDING}),
    # due again; cancelled; expired; a restore.
    S.WAITING_RETRY: frozenset({S.PENDING, S.ABANDONED, S.EXPIRED, S.RECOVERY_PENDING}),
    # verification: delivered → confirmed; proved not delivered → pending; unknown → human.
    S.RECOVERY_PENDING: frozenset({S.CONFIRMED, S.PENDING, S.UNVERIFIED}),
    S.CONFIRMED: frozenset(),
    S.FAILED: frozenset(),
    S.ABANDONED: frozenset(),
    S.EXPIRED: frozenset(),
    # in doubt for good: only a person resolves it, as delivered or as not delivered.
    S.UNVERIFIED: frozenset({S.CONFIRMED, S.PENDING}),
}

# Moves only a person makes (resolving an in-doubt send; `pacer after-restore`, which puts
# every send the restored database cannot vouch for in doubt); Pacer itself never makes them.
BY_OPERATOR: frozenset[tuple[ItemStatus, ItemStatus]] = frozenset(
    {(S.UNVERIFIED, S.CONFIRMED), (S.UNVERIFIED, S.PENDING),
     (S.PENDING, S.RECOVERY_PENDING), (S.CLAIMED, S.RECOVERY_PENDING), (S.WAITING_RETRY, S.RECOVERY_PENDING)})
# Statuses Pacer never moves an item out of by itself.
TERMINAL: frozenset[ItemStatus] = frozenset(
    s for s, nxt in TRANSITIONS.items() if all((s, t) in BY_OPERATOR for t in nxt))
# Statuses in which a command for the item may legitimately be (re)published.
DISPATCHABLE: frozenset[ItemStatus] = frozenset({S.PENDING})


class IllegalTransition(ValueError):
    """A status change that the transition table does not allow."""


def sources_of(target: ItemStatus) -> frozenset[ItemStatus]:
    """All statuses from which ``target`` may be reached."""
    return frozenset(src for src, nxt in TRANSITIONS.items() if target in nxt)


def check_transition(src: ItemStatus, dst: ItemStatus) -> None:
    """Raise :class:`IllegalTransition` unless ``src → dst`` is in the table."""
    if dst not in TRANSITIONS[src]:
        raise IllegalTransition(f"item cannot move from {src.value!r} to {dst.value!r}")


def is_terminal(status: ItemStatus) -> bool:
    return status in TERMINAL
