"""Shaping what the database returns into what an operator reads."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pacer_common.domain.limits import DEFAULTS, Pacing


def sum_counts(per_shard: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Items per status of a job: its shards' counts added up (zeros left out)."""
    total: dict[str, int] = {}
    for counts in per_shard:
        for status, n in counts.items():
            total[status] = total.get(status, 0) + int(n)
    return {s: n for s, n in sorted(total.items()) if n}


def failure_categories(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``(error_class, status, n)`` rows → one entry per error class, biggest first:
    ``{"error_class": "needs_human", "total": 12, "by_status": {"failed": 12}}``."""
    by_class: dict[str, dict[str, int]] = {}
    for r in rows:
        by_class.setdefault(r["error_class"], {})[r["status"]] = int(r["n"])
    out = [{"error_class": c, "total": sum(s.values()), "by_status": dict(sorted(s.items()))}
           for c, s in by_class.items()]
    return sorted(out, key=lambda e: (-e["total"], e["error_class"]))


def read_ahead(counts: Mapping[str, int], failures: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """Statuses where the failure categories (read from the items now) count more items than
    the job's counts (the reconciler's projection of the event log, about a second behind):
    ``{status: (in the categories, in the counts)}``. Empty once the projection has caught up.
    Fewer in the categories is not news: they count only items with an error class."""
    live: dict[str, int] = {}
    for c in failures:
        for status, n in c["by_status"].items():
            live[status] = live.get(status, 0) + int(n)
    return {s: (n, int(counts.get(s, 0))) for s, n in sorted(live.items()) if n > int(counts.get(s, 0))}


# Statuses an item does not leave by itself: what a progress bar counts as done.
DONE = ("confirmed", "failed", "abandoned", "expired", "unverified")
NOT_DELIVERED = ("failed", "abandoned", "expired", "unverified")
# A running shard with open items and no progress for this long is marked stalled; a guid with
# an item ready and no send for this long beyond its own pacing gap (PACER_CONTROL_STALLED_AFTER_S).
STALLED_AFTER_S = 120.0


def progress(counts: Mapping[str, int], total: int) -> dict[str, Any]:
    """How far items have run: percentages of ``total`` delivered and not delivered, and counts."""
    total = max(int(total), sum(int(n) for n in counts.values()), 0)
    delivered = int(counts.get("confirmed", 0))
    failed = sum(int(counts.get(s, 0)) for s in NOT_DELIVERED)
    done = delivered + failed

    def pct(n: int) -> float:
        return round(100.0 * n / total, 1) if total else 0.0

    return {"total": total, "done": done, "delivered": delivered, "failed": failed, "open": total - done,
            "done_pct": pct(done), "delivered_pct": pct(delivered), "failed_pct": pct(failed)}


def stalled(job_status: str, shard: Mapping[str, Any], now: datetime, pacing: Pacing = DEFAULTS,
            after_s: float = STALLED_AFTER_S) -> bool:
    """An open shard (pending or running) of a running job, its guid neither paused nor out
    (``guid_held``), with items still open, that has not moved since ``quiet_since`` (its last
    progress, its creation, or its job's start when that is later) for longer than its guid's
    limits explain: quiet hours, a send window's cap, the guid's own pace (stretched by its
    rate-limit ``penalty``) or its job's (``job_gap``), and ``after_s`` beyond (:meth:`Pacing.stalled`, as the reconciler's
    ``pacer_reconciler_stalled_shards`` counts them). ``pacing`` is the guid's, ``windows`` its send windows."""
    if job_status != "running" or shard["status"] not in ("pending", "running") or shard.get("guid_held"):
        return False
    if progress(shard["counts"], shard["total"])["open"] <= 0:
        return False
    since = shard.get("quiet_since") or shard.get("last_progress_at")
    return since is not None and pacing.stalled(since, now, after_s, shard.get("windows"),
                                                float(shard.get("job_gap") or 0.0), float(shard.get("penalty") or 1.0))


QUEUED_STATES = frozenset({"ready", "scheduled", "held", "waiting_retry"})  # a backlog's states not yet begun


def queued_count(counts: Mapping[str, Any]) -> int:
    """Items queued for a guid (pending or waiting to retry): a list row's ``queued``, or the
    sum of a backlog's states not yet begun."""
    if "by_lane" in counts:
        return sum(n for states in counts["by_lane"].values() for state, n in states.items() if state in QUEUED_STATES)
    return int(counts["queued"] or 0)


def quiet_until(pacing: Pacing, now: datetime) -> datetime | None:
    """When the guid's quiet hours end, if ``now`` is inside them (its batch sends are held)."""
    left = pacing.quiet_remaining(now.timestamp())
    return now + timedelta(seconds=left) if left > 0 else None


def capped_until(pacing: Pacing, windows: Mapping[str, Any] | None, now: datetime) -> datetime | None:
    """When the guid's send window ends, if one has used its batch share of the cap (its
    batch sends wait for it; quiet hours aside)."""
    left = pacing.capped_for(now.timestamp(), windows)
    return now + timedelta(seconds=left) if left > 0 else None


def applied_penalty(guid: Mapping[str, Any]) -> float:
    """The rate-limit penalty a guid is paced at now: its lease row's while a sender holds
    the guid (an owner, not expired), else none (nobody paces it)."""
    if guid.get("owner") is None or guid.get("expired"):
        return 1.0
    return float(guid.get("penalty") or 1.0)


def activity(queued: int, ready: int, last_send_at: datetime | None, oldest_ready: datetime | None,
             now: datetime, pacing: Pacing = DEFAULTS, after_s: float = STALLED_AFTER_S,
             windows: Mapping[str, Any] | None = None, job_gap_s: float = 0.0, penalty: float = 1.0,
             gateway_quiet_until: datetime | None = None) -> str:
    """What an unheld guid is doing: ``idle`` (nothing queued); ``waiting`` (items queued, none
    ready to send now: their jobs or shards paused, or scheduled later); ``quiet`` (items
    ready, inside the guid's quiet hours: batch sends wait for their end); ``capped`` (items
    ready, a minute, hour or day window of the guid's has used its batch share of the cap:
    ``windows`` as ``guid_leases`` keeps them); ``stalled`` (an item has been ready and nothing
    sent for ``after_s`` beyond the guid's own longest gap between sends, stretched by its
    rate-limit ``penalty``, or the shortest interval per guid of its ready items' jobs
    (``job_gap_s``) when longer, counted from the end of any quiet the gateway asked of it: a
    guid stuck); ``slowed`` (sending, at its rate-limit ``penalty`` times its interval, or
    keeping the quiet its gateway asked for until ``gateway_quiet_until``: the gateway
    rate-limited it lately, or left a send unanswered); else ``sending``."""
    if not queued:
        return "idle"
    if not ready:
        return "waiting"
    if quiet_until(pacing, now) is not None:
        return "quiet"
    if capped_until(pacing, windows, now) is not None:
        return "capped"
    busy_since = max((t for t in (last_send_at, oldest_ready, gateway_quiet_until) if t is not None), default=None)
    if busy_since is not None and pacing.stalled(busy_since, now, after_s, windows, job_gap_s, penalty):
        return "stalled"
    asked_quiet = gateway_quiet_until is not None and gateway_quiet_until > now
    return "slowed" if penalty > 1 or asked_quiet else "sending"


def examples(items: Iterable[Mapping[str, Any]], per_class: int = 3) -> dict[str, list[Mapping[str, Any]]]:
    """A few failed items of each error class, to show what a category means."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for item in items:
        bucket = out.setdefault(str(item.get("last_error_class")), [])
        if len(bucket) < per_class:
            bucket.append(item)
    return out


def describe_totals(totals: Mapping[str, int]) -> str:
    """``created 3, already_queued 1`` — the non-zero outcomes of a bulk action."""
    parts = [f"{k} {n}" for k, n in totals.items() if n]
    return ", ".join(parts) or "no item matched"


def number(text: str) -> int | float | str:
    """A form field as the number it spells, else as given (the limits parser says what is wrong)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def ago(when: datetime | None, now: datetime) -> str:
    """``12 s ago``, ``5 min ago``, ``3 h ago``; ``never`` for None."""
    if when is None:
        return "never"
    s = max(0, int((now - when).total_seconds()))
    if s < 120:
        return f"{s} s ago"
    if s < 7200:
        return f"{s // 60} min ago"
    return f"{s // 3600} h ago"


def stamp(when: datetime | str | None) -> str:
    """``2026-11-30 09:00:01.250``: an event's time to the millisecond (events of one send are
    milliseconds apart), from a datetime or the ISO text a JSON column holds; ``–`` for none."""
    if isinstance(when, str):
        try:
            at = datetime.fromisoformat(when)
        except ValueError:
            return when
    elif when is None:
        return "–"
    else:
        at = when
    at = in_utc(at)
    return f"{at:%Y-%m-%d %H:%M:%S}.{at.microsecond // 1000:03d}"


def in_utc(at: datetime) -> datetime:
    """The console's zone: UTC, as its filters read times (a naive time is taken as UTC)."""
    return at.astimezone(UTC) if at.tzinfo is not None else at


def projection(guids: Iterable[Mapping[str, Any]], pacing: Callable[[Mapping[str, Any]], Pacing],
               priority: int) -> dict[str, Any]:
    """How long a job takes at current limits: guids send in parallel, so the slowest guid
    decides; each at its own limits (``pacing`` of its row: ``guid``, ``items``, and what
    ``pacing`` reads), by its spacing and its window caps' batch share (``Pacing.send_seconds``)."""
    rows = []
    for g in guids:
        p, items = pacing(g), int(g["items"])
        rows.append({"guid": g["guid"], "items": items, "interval_s": round(p.spacing_s(priority), 3),
                     "caps": ", ".join(f"{batch:,}/{name}" for name, _, _, batch in p.windows()) or None,
                     "seconds": round(p.send_seconds(items, priority), 1)})
    slowest = max(rows, key=lambda r: r["seconds"]) if rows else None
    return {"guids": rows, "seconds": slowest["seconds"] if slowest else 0.0,
            "slowest_guid": slowest["guid"] if slowest else None, "items": sum(r["items"] for r in rows)}


def duration(seconds: float | None) -> str:
    """``45 s``, ``12 min``, ``3.5 h``, ``4.2 days``; ``never`` for None."""
    if seconds is None:
        return "never"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def shown(value: Any) -> str:
    """A value an audit record holds, as a person reads it: text as it is, anything else as
    JSON with its characters as they are (escaped for HTML by the page, not as JSON escapes)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def changes(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[tuple[str, Any, Any]]:
    """What an audited action changed: ``(field, before, after)`` for each field that differs."""
    b, a = dict(before or {}), dict(after or {})
    return [(k, b.get(k), a.get(k)) for k in dict.fromkeys([*b, *a]) if b.get(k) != a.get(k)]


BODY_CHARS = 65_536  # of a dead letter's body shown (API detail, console); its download has all of it


def body_preview(value: bytes) -> tuple[str, bool]:
    """A record's bytes as text to read (UTF-8, invalid bytes replaced), cut at
    :data:`BODY_CHARS`, and whether it was cut."""
    text = value.decode(errors="replace")
    return text[:BODY_CHARS], len(text) > BODY_CHARS


def budget_used_up(budget: Mapping[str, Any] | None) -> bool:
    """Whether a job's send budget (``{"max_sends", "used"}``) is used up: it sends nothing
    more, and is not resumed, until a larger one is confirmed."""
    cap = (budget or {}).get("max_sends")
    return cap is not None and int((budget or {}).get("used") or 0) >= int(cap)


def limits_shown(own: Any, fleet: Mapping[str, Any]) -> list[tuple[str, Any, bool]]:
    """The limits a guid goes by beyond its sender's defaults, as ``(name, value, inherited)``:
    its own, then every guid's (``'*'``) it does not set itself (they combine name by name).
    A row that is not an object counts as none, as the senders skip it."""
    mine = own if isinstance(own, Mapping) else {}
    return ([(k, v, False) for k, v in sorted(mine.items())]
            + [(k, v, True) for k, v in sorted(fleet.items()) if k not in mine])


def not_resendable(letter: Any) -> str | None:
    """Why a dead-lettered job request is not offered for republishing as it is, or None: a
    record that holds only part of the request, or bytes that are not a JSON object (no check
    could pass them; the request is fixed and published as a new one)."""
    if (why := letter.not_republishable()) is not None:
        return str(why)
    try:
        body = json.loads(letter.value)
    except (ValueError, RecursionError) as exc:
        return f"its bytes are not JSON ({str(exc)[:120]}): fix the request and publish it as a new one"
    if not isinstance(body, dict):
        return f"its body is a JSON {type(body).__name__}, not an object: fix the request and publish it as a new one"
    return None
