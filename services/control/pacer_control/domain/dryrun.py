"""A dry run: what the planner would make of a job request, without storing or sending it.

The request is checked by the very function the planner runs on every request it consumes
(``pacer_common.domain.validation.validate_request``), so a dry run refuses exactly what the
planner dead-letters, with the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pacer_common.domain.ids import Guid, RequestId, ToId
from pacer_common.domain.requests import lane_of
from pacer_common.domain.validation import CannotPlan, ValidRequest

# The request cannot be planned; the message says why (the planner's own error).
DryRunError = CannotPlan


@dataclass(frozen=True)
class Sample:
    guid: Guid
    to_id: ToId
    content: str


@dataclass(frozen=True)
class DryRun:
    request_id: RequestId
    kind: str
    priority: int
    lane: str
    items: int | None  # None: the audience is fetched when the job is planned (requery)
    shards: dict[Guid, int]  # guid → items
    samples: list[Sample]
    template_fields: list[str]
    budget_max_sends: int | None
    warnings: list[str]


def dry_run(valid: ValidRequest, now: datetime, samples: int = 5) -> DryRun:
    """What planning ``valid`` (a request ``validate_request`` accepted) would give."""
    req = valid.request
    priority = req.effective_priority
    budget = req.budget.max_sends if req.budget else None
    if valid.targets is None:  # a requery audience: only the planner fetches it
        url = getattr(req.targets, "url", "its URL")
        note = (f"the audience is fetched from {url} when the job is planned; a dry run does not fetch it, "
                f"so items, shards and samples are not known yet")
        return DryRun(req.request_id, req.kind.value, priority, lane_of(priority), None, {}, [],
                      valid.template_fields, budget, [note])
    shards: dict[Guid, int] = {}
    for target, _, _ in valid.targets:
        shards[target.guid] = shards.get(target.guid, 0) + 1
    shown = [Sample(t.guid, t.to_id, content) for t, content, _ in valid.targets[:samples]]
    total = len(valid.targets)
    warnings = []
    if req.budget is not None and req.budget.max_sends < total:
        warnings.append(f"budget.max_sends ({req.budget.max_sends}) is below the {total} items: the job "
                        f"pauses when the budget is used up, until an admin confirms a larger one")
    if req.not_before is not None and req.not_before > now:
        warnings.append(f"nothing is sent before not_before ({req.not_before.isoformat()})")
    return DryRun(req.request_id, req.kind.value, priority, lane_of(priority), total, shards, shown,
                  valid.template_fields, budget, warnings)
