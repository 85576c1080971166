"""Admission control: a guid's backlog is bounded, and batch work is refused first.

Online work (takeover prompts, auto-replies) is always admitted: it is small, and refusing
a customer's reply to protect a campaign would invert the priorities. Batch work that would
push any guid past the limit is refused up front, whole, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping

from pacer_common.domain.requests import lane_of
from pacer_planner.domain.planning import Plan


def refusal(plan: Plan, queued: Mapping[str, int], limit: int) -> str | None:
    """Why this plan may not be admitted, or None if it may."""
    if lane_of(plan.priority) == "online":
        return None
    over = [(g, queued.get(g, 0), n) for g, n in plan.shards.items() if queued.get(g, 0) + n > limit]
    if not over:
        return None
    over.sort(key=lambda x: x[1] + x[2], reverse=True)
    guid, q, n = over[0]
    more = f" (and {len(over) - 1} more guids)" if len(over) > 1 else ""
    return (f"admission refused: guid {guid!r} has {q} queued items and this request adds {n}, "
            f"over the limit of {limit} per guid{more}; retry later or split the request")
