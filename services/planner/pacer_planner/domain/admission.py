"""Admission control: a guid's backlog is bounded, and batch work is refused first.

Online work (a takeover prompt or an auto-reply sent in the online lane) is always admitted:
it is small, and refusing a customer's reply to protect a campaign would invert the
priorities. Online takes both: an online kind, and an effective priority in the online lane.
The priority alone is not enough (a campaign or a ticket notification asking for priority 0
or 1 is bounded like any other), nor is the kind alone (an auto-reply asking for priority 5
goes out in the batch lane, behind campaigns, and is bounded like them). Everything else that
would push any guid past the limit is refused up front, whole, with the reason.

A requery job is admitted page by page instead: a page that would push a guid past the
limit waits (the pager fetches it again later) until the backlog has drained. A page is
never held back by a guid with nothing queued, so a page larger than the limit cannot wait
forever.
"""

from __future__ import annotations

from collections.abc import Mapping

from pacer_common.domain.ids import Guid
from pacer_common.domain.requests import DEFAULT_PRIORITY, JobKind, lane_of
from pacer_planner.domain.planning import Plan

# The kinds that are online by nature (their own priority is in the online lane): takeover
# prompts and auto-replies. Only these pass admission whatever the backlog, and only while
# they are sent in the online lane (:func:`exempt`).
ADMITTED_KINDS: frozenset[JobKind] = frozenset(k for k, p in DEFAULT_PRIORITY.items() if lane_of(p) == "online")


def exempt(kind: JobKind, priority: int) -> bool:
    """Whether work of ``kind`` at (effective) ``priority`` passes admission whatever the
    backlog: an online kind, in the online lane."""
    return kind in ADMITTED_KINDS and lane_of(priority) == "online"


def refusal(plan: Plan, queued: Mapping[Guid, int], limit: int) -> str | None:
    """Why this plan may not be admitted, or None if it may."""
    reason = _over(plan.request.kind, plan.priority, plan.per_guid, queued, limit, "this request", strict=True)
    return None if reason is None else f"{reason}; retry later or split the request"


def page_refusal(kind: JobKind, priority: int, adds: Mapping[Guid, int], queued: Mapping[Guid, int],
                 limit: int) -> str | None:
    """Why a requery page of a job of ``kind`` at (effective) ``priority`` must wait, or None
    if it may be stored now."""
    return _over(kind, priority, adds, queued, limit, "this page", strict=False)


def _over(kind: JobKind, priority: int, adds: Mapping[Guid, int], queued: Mapping[Guid, int], limit: int,
          what: str, *, strict: bool) -> str | None:
    if exempt(kind, priority):
        return None
    over = [(g, queued.get(g, 0), n) for g, n in adds.items()
            if queued.get(g, 0) + n > limit and (strict or queued.get(g, 0) > 0)]
    if not over:
        return None
    over.sort(key=lambda x: x[1] + x[2], reverse=True)
    guid, q, n = over[0]
    more = f" (and {len(over) - 1} more guids)" if len(over) > 1 else ""
    return (f"admission refused: guid {guid!r} has {q} queued items and {what} adds {n}, "
            f"over the limit of {limit} per guid{more}")


def tenant_refusal(tenant: str, known: bool, foreign: list[str], held: int, max_guids: int | None) -> str | None:
    """Why a job may not be stored for ``tenant``, or None: the tenant must exist, its guids
    must not be another tenant's, and it may hold at most ``max_guids`` guids."""
    if not known:
        return f"unknown tenant {tenant!r}: create it first (POST /api/v1/tenants) or leave 'tenant' out for 'default'"
    if foreign:
        return (f"guid {foreign[0]!r} belongs to another tenant than {tenant!r}; a guid sends for one tenant only"
                + (f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""))
    if max_guids is not None and held > max_guids:
        return f"tenant {tenant!r} would hold {held} guids, over its quota of {max_guids} (max_guids)"
    return None
