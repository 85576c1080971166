"""A dry run: what the planner would make of a job request, without storing or sending it.

Services do not import each other, so the planner's checks that decide whether a request can
be planned are restated here: expiry, the template, duplicate targets and missing variables,
with the planner's own wording. ``tests/unit/test_control_dryrun.py`` runs both on the same
requests and fails when they disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pacer_common.domain.requests import JobRequest, lane_of
from pacer_common.domain.templates import render_targets
from pacer_common.domain.templates import template_fields as _template_fields


class DryRunError(ValueError):
    """The request is valid JSON for the schema but cannot be planned; the message says why."""


@dataclass(frozen=True)
class Sample:
    guid: str
    to_id: str
    content: str


@dataclass(frozen=True)
class DryRun:
    request_id: str
    kind: str
    priority: int
    lane: str
    items: int | None  # None: the audience is fetched when the job is planned (requery)
    shards: dict[str, int]  # guid → items
    samples: list[Sample]
    template_fields: list[str]
    budget_max_sends: int | None
    warnings: list[str]


def template_fields(template: str) -> list[str]:
    return _template_fields(template, DryRunError)


def dry_run(req: JobRequest, now: datetime, samples: int = 5) -> DryRun:
    """Plan ``req`` in memory; raise :class:`DryRunError` where the planner would refuse it."""
    if req.expire_at is not None and req.expire_at <= now:
        raise DryRunError(f"request already expired at {req.expire_at.isoformat()}")
    template = req.message.content
    fields = template_fields(template)
    priority = req.effective_priority
    budget = req.budget.max_sends if req.budget else None
    targets = getattr(req.targets, "items", None)
    if targets is None:  # a requery audience: only the planner fetches it
        url = getattr(req.targets, "url", "its URL")
        note = (f"the audience is fetched from {url} when the job is planned; a dry run does not fetch it, "
                f"so items, shards and samples are not known yet")
        return DryRun(req.request_id, req.kind.value, priority, lane_of(priority), None, {}, [], fields, budget,
                      [note])
    shards: dict[str, int] = {}
    shown: list[Sample] = []
    for target, content in render_targets(template, targets, DryRunError):
        shards[target.guid] = shards.get(target.guid, 0) + 1
        if len(shown) < samples:
            shown.append(Sample(target.guid, target.to_id, content))
    total = len(targets)
    warnings = []
    if req.budget is not None and req.budget.max_sends < total:
        warnings.append(f"budget.max_sends ({req.budget.max_sends}) is below the {total} items: the job "
                        f"pauses when the budget is used up, until an admin confirms a larger one")
    if req.not_before is not None and req.not_before > now:
        warnings.append(f"nothing is sent before not_before ({req.not_before.isoformat()})")
    return DryRun(req.request_id, req.kind.value, priority, lane_of(priority), total, shards, shown, fields,
                  budget, warnings)
