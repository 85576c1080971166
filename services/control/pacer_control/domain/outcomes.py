"""What an action did, in the words the database functions answer with."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pacer_common.domain.ids import ItemId

# done: changed; noop: already so, nothing changed; conflict: not allowed now (message says
# why); not_found: no such target.
Outcome = Literal["done", "noop", "conflict", "not_found"]


@dataclass(frozen=True)
class ActionResult:
    outcome: Outcome
    message: str
    status: str | None = None  # the target's status afterwards, when it has one
    extra: dict[str, Any] = field(default_factory=dict)


# pacer_retry_item / pacer_cancel_item answers → the common outcome words.
RETRY_OUTCOMES: dict[str, Outcome] = {
    "created": "done", "already_queued": "conflict", "already_delivered": "conflict",
    "conflict": "conflict", "refused": "conflict", "not_found": "not_found",
}
CANCEL_OUTCOMES: dict[str, Outcome] = {
    "cancelled": "done", "too_late": "conflict", "already_final": "conflict", "not_found": "not_found",
}


@dataclass(frozen=True)
class ItemRetry:
    """One item's answer in a bulk retry (``outcome`` as pacer_retry_item says it)."""

    item_id: ItemId
    outcome: str
    new_item: ItemId | None
    message: str


def tally(results: Iterable[ItemRetry]) -> dict[str, int]:
    """Items per outcome, every outcome word present (0 when none): the audit's ``after``."""
    counts = Counter(r.outcome for r in results)
    return {k: counts.get(k, 0) for k in RETRY_OUTCOMES}
