"""Turn a validated job request into a plan: the job, its shards, one item per target.

A snapshot request is planned whole: every target, and the shards fixed at creation (one
per guid, or ``ceil(n / max_shard_items)`` sub-shards of a very long guid, see
``sharding``). A requery request is planned without items: its targets arrive page by page
(``targets.plan_page``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pacer_common.domain.ids import Guid, IdemKey, ItemId, JobId, ToId, job_id_for, new_item_ids
from pacer_common.domain.requests import JobKind, JobRequest
from pacer_common.domain.templates import render as render  # re-exported: the requery pages render too
from pacer_common.domain.templates import template_fields as _template_fields
from pacer_common.domain.validation import (
    CannotPlan,
    Rendered,
    RenderedTargets,
    ValidRequest,
    common_content,
    most_shared,
    prepare,
)
from pacer_common.domain.validation import idem_key as idem_key  # re-exported
from pacer_planner.domain.sharding import DEFAULT_MAX_SHARD_ITEMS, ShardKey, sub_counts, sub_of

# The request is well-formed JSON but cannot be planned; the message says why. The same
# error the control API's dry run raises: both run ``validation.prepare``.
PlanError = CannotPlan


@dataclass(frozen=True, slots=True)
class PlannedItem:
    """One item of a plan. ``text``: its content, or (``vars`` given) the template its content
    is rendered from each time it is read: a job holds its template once and each item its
    target's vars, never every rendered message at once (see ``validation.RenderedTargets``)."""

    item_id: ItemId
    guid: Guid
    to_id: ToId
    text: str
    idem_key: IdemKey
    sub: int = 0
    vars: Mapping[str, str] | None = None

    @property
    def content(self) -> str:
        return self.text if self.vars is None else render(self.text, self.vars)

    @property
    def shard(self) -> ShardKey:
        return (self.guid, self.sub)


def count_shards(items: list[PlannedItem]) -> dict[ShardKey, int]:
    """Items per shard, in first-seen order."""
    shards: dict[ShardKey, int] = {}
    for it in items:
        shards[it.shard] = shards.get(it.shard, 0) + 1
    return shards


def count_guids(shards: Mapping[ShardKey, int]) -> dict[Guid, int]:
    """Items per guid, summed over its sub-shards."""
    out: dict[Guid, int] = {}
    for (guid, _), n in shards.items():
        out[guid] = out.get(guid, 0) + n
    return out


@dataclass(frozen=True)
class Plan:
    job_id: JobId
    request: JobRequest
    priority: int
    shards: dict[ShardKey, int]  # (guid, sub) → number of items; fixed at creation
    items: list[PlannedItem]
    created_at: datetime  # the job's creation time: stored on the job, stamped on its items' ids
    not_before: datetime | None = None  # the request's, or later: held for coalescing
    coalesce: tuple[str, int] | None = None  # (business id, status version) of a ticket notification
    subs: dict[Guid, int] = field(default_factory=dict)  # guid → its number of sub-shards
    # The job's common content, stored once: validation.common_content, else (a snapshot) the
    # text most of its items have (validation.most_shared).
    item_content: str | None = None

    def stored_content(self, item: PlannedItem) -> str | None:
        """What the item's row stores as its content: nothing when it is the job's common one."""
        content = item.content
        return None if content == self.item_content else content

    @property
    def per_guid(self) -> dict[Guid, int]:
        return count_guids(self.shards)


def template_fields(template: str) -> list[str]:
    return _template_fields(template, PlanError)


def coalescing(req: JobRequest, now: datetime, window: timedelta) -> tuple[datetime | None, tuple[str, int] | None]:
    """A ticket notification waits ``window`` before it may be sent, so that a newer status
    of the same business id arriving meanwhile supersedes it (A → B → C sends only C)."""
    if req.kind is not JobKind.TICKET_NOTIFY or req.business_id is None or req.status_version is None:
        return req.not_before, None
    key = (req.business_id, req.status_version)
    if window <= timedelta(0):
        return req.not_before, key
    held_until = now + window
    if req.expire_at is not None and req.expire_at <= held_until:
        # Held past its expiry it could never go out: sent without the wait (a newer status
        # may still come after it, as without coalescing).
        return req.not_before, key
    return (held_until if req.not_before is None or req.not_before < held_until else req.not_before), key


def plan(req: JobRequest | ValidRequest, now: datetime, coalesce_window: timedelta = timedelta(0),
         max_shard_items: int = DEFAULT_MAX_SHARD_ITEMS) -> Plan:
    """Build the plan of a validated request (a bare request is validated first: raises
    :class:`PlanError` with a reason an operator can act on)."""
    valid = req if isinstance(req, ValidRequest) else prepare(req, now)
    request = valid.request
    not_before, coalesce = coalescing(request, now, coalesce_window)
    job_id = job_id_for(request.request_id)
    common = common_content(request)
    if valid.targets is None:  # requery: its targets are paged in
        return Plan(job_id, request, request.effective_priority, {}, [], now, not_before, coalesce,
                    item_content=common)
    per_guid: dict[Guid, int] = {}
    for target in valid.targets.targets:
        per_guid[target.guid] = per_guid.get(target.guid, 0) + 1
    subs = sub_counts(per_guid, max_shard_items)
    items = snapshot_items(valid.targets, subs, now)
    if common is None:  # rendered per target: still one text for many, when their values agree
        common = most_shared(content for _, content, _ in valid.targets)
    return Plan(job_id, request, request.effective_priority, count_shards(items), items, now, not_before, coalesce,
                subs, common)


def snapshot_items(targets: RenderedTargets, subs: Mapping[Guid, int], job_created_at: datetime
                   ) -> list[PlannedItem]:
    """:func:`planned_items` of a snapshot, each item's content left to be rendered when read."""
    text, variables = targets.text, (lambda t: t.vars) if targets.templated else (lambda t: None)
    return [
        PlannedItem(item_id, t.guid, t.to_id, text, key, sub_of(t.to_id, subs[t.guid]), variables(t))
        for item_id, t, key in zip(new_item_ids(len(targets), job_created_at), targets.targets, targets.keys,
                                   strict=True)
    ]


def planned_items(rendered: Sequence[Rendered], subs: Mapping[Guid, int], job_created_at: datetime
                  ) -> list[PlannedItem]:
    """One item per rendered target, in its guid's sub-shard, with a fresh id stamped with the
    job's creation time (all of a job's items share its time partition)."""
    return [
        PlannedItem(item_id, t.guid, t.to_id, content, key, sub_of(t.to_id, subs[t.guid]))
        for item_id, (t, content, key) in zip(new_item_ids(len(rendered), job_created_at), rendered, strict=True)
    ]
