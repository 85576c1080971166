"""The pacing limits of a guid, defined once, and what may be written to ``guid_limits``.

:class:`Pacing` is the one definition of every pacing field: its type, its bounds and its
default. The sender's ``Limits`` is this model with the pacing arithmetic added; a hot
limit change (``pacer limits`` or the Control API) is any subset of these fields, checked
here before it is stored, so a typo or an impossible value is refused at the door instead
of being ignored by every sender that reads it; the sender's settings take their defaults
from it. Only the fields whose default is ``null`` (the window caps, quiet hours) may be
set to ``null``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from datetime import time as dtime
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)

Cap = Annotated[int, Field(gt=0)] | None
# The send windows: the per_<name> caps, and guid_leases.windows. The minute and the hour are
# UTC's (floor(epoch / size)); the day is the guid's own, in its time zone (Pacing.window).
WINDOWS: tuple[tuple[str, int], ...] = (("minute", 60), ("hour", 3600), ("day", 86400))
SIZES = dict(WINDOWS)
JitterDist = Literal["uniform", "exponential"]


def kept_window(name: str, kept: Any) -> tuple[int, float] | None:
    """A window as ``guid_leases.windows`` keeps it → (sends, the epoch second it ends), or
    None if it is not one. The trigger ``guid_send_windows`` writes ``[index, sends, end]``;
    rows written before the day became the guid's own hold ``[index, sends]``, whose window
    (the clock's) ends at ``(index + 1) * size``."""
    size = SIZES.get(name)
    if size is None or not isinstance(kept, list | tuple) or len(kept) not in (2, 3):
        return None
    try:
        index, sends = int(kept[0]), int(kept[1])
        end = float(kept[2]) if len(kept) == 3 else float((index + 1) * size)
    except (TypeError, ValueError):
        return None
    return sends, end


def parse_quiet_hours(text: str) -> tuple[dtime, dtime]:
    """``"22:00-08:00"`` → (start, end), local times; the window may wrap midnight."""
    start, sep, end = text.partition("-")
    try:
        if not sep:
            raise ValueError
        return dtime.fromisoformat(start.strip()), dtime.fromisoformat(end.strip())
    except ValueError:
        raise ValueError(f"quiet_hours must look like 22:00-08:00, not {text!r}") from None


def format_quiet_hours(span: tuple[dtime, dtime]) -> str:
    """(start, end) → ``"22:00-08:00"``, as stored in ``guid_limits``."""
    return "-".join(t.isoformat("minutes" if not t.second and not t.microsecond else "auto") for t in span)


def _quiet_hours(value: Any) -> Any:
    return parse_quiet_hours(value) if isinstance(value, str) else value


QuietHours = Annotated[tuple[dtime, dtime], BeforeValidator(_quiet_hours),
                       PlainSerializer(format_quiet_hours, return_type=str, when_used="json")]


class Pacing(BaseModel):
    """One account's pacing limits. Hot-adjustable: a new value applies from the next decision."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    min_interval_s: float = Field(1.0, ge=0)
    jitter_s: float = Field(0.5, ge=0)
    jitter_dist: JitterDist = "uniform"
    online_reserve: float = Field(0.2, ge=0, lt=1)
    # The reserve binds batch work of this priority number or above (campaigns: 3). More urgent
    # batch work (ticket notifications: 2) is spaced at the account's whole rate — still after
    # online work, and within the batch share of the window caps.
    reserve_from_priority: int = Field(3, ge=2, le=10)
    per_minute: Cap = None
    per_hour: Cap = None
    per_day: Cap = None
    # [start, end) local time, may wrap midnight; written "HH:MM-HH:MM"
    quiet_hours: QuietHours | None = None
    # Of the quiet hours and of the day window (per_day starts again at the guid's midnight).
    timezone: str = "Asia/Shanghai"
    rate_limited_penalty: float = Field(2.0, ge=1)
    penalty_decay: float = Field(0.9, gt=0, le=1)
    max_penalty: float = Field(32.0, ge=1)  # repeated rate limits slow the guid at most this many times
    # Shedding: batch items that cannot go out before their expire_at at the guid's current
    # rate are expired early (reason ``shed``) instead of waiting to expire at their turn.
    shed: bool = True
    # Batch yields entirely while an online command has waited longer than this (seconds).
    online_yield_s: float = Field(10.0, ge=0)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {v!r} (use an IANA name such as Asia/Shanghai)") from None
        return v

    @property
    def batch_interval_s(self) -> float:
        """Batch spacing: the account's rate minus the online reserve."""
        return self.min_interval_s / (1 - self.online_reserve)

    @property
    def mean_jitter_s(self) -> float:
        return self.jitter_s if self.jitter_dist == "exponential" else self.jitter_s / 2

    def windows(self) -> list[tuple[str, int, int, int]]:
        """(window, size in seconds, cap for all traffic, cap for batch traffic)."""
        out = []
        for name, size in WINDOWS:
            cap = getattr(self, f"per_{name}")
            if cap is not None:
                out.append((name, size, cap, self.batch_share(cap)))
        return out

    def batch_share(self, cap: int) -> int:
        """Batch traffic's share of a window ``cap``: the cap less the online reserve, rounded
        down, but at least one send. A share of 0 would hold batch work for good (every
        window, none of its sends allowed); so where the reserve would take the whole cap (a
        cap of 1, or 4 with a reserve of 0.8), batch work gets one send a window and online
        traffic what is left, which may be nothing: an online send then waits for the next
        window too."""
        return max(1, int(cap * (1 - self.online_reserve)))

    def spacing_s(self, priority: int) -> float:
        """The mean gap between two sends of work of ``priority`` by the interval and jitter
        alone: the batch interval, or the whole rate for batch work more urgent than
        ``reserve_from_priority`` (and online work)."""
        base = self.batch_interval_s if priority >= self.reserve_from_priority else self.min_interval_s
        return base + self.mean_jitter_s

    def send_seconds(self, items: int, priority: int) -> float:
        """About how long the guid takes to send ``items`` of ``priority`` by its limits
        alone: one each :meth:`spacing_s`, and no faster than each window cap's batch share
        lets them through (a whole window for each share but the last; a share is never 0:
        :meth:`batch_share`). Rate-limit penalties, quiet hours and the guid's other work only
        make it slower."""
        seconds = items * self.spacing_s(priority)
        for _name, size, _cap, batch_cap in self.windows():
            seconds = max(seconds, (-(-items // batch_cap) - 1) * size)
        return seconds

    @property
    def longest_gap_s(self) -> float:
        """The longest a guid waits between two batch sends by its interval and jitter alone
        (no rate-limit penalty, no window cap, no quiet hours)."""
        return self.batch_interval_s + (4 if self.jitter_dist == "exponential" else 1) * self.jitter_s

    def quiet_remaining(self, wall: float) -> float:
        """Seconds until quiet hours end, 0 outside them."""
        if self.quiet_hours is None:
            return 0.0
        start, end = self.quiet_hours
        local = datetime.fromtimestamp(wall, ZoneInfo(self.timezone))
        now = local.time()
        inside = start <= now < end if start < end else (now >= start or now < end)
        if not inside:
            return 0.0
        end_at = local.replace(hour=end.hour, minute=end.minute, second=end.second, microsecond=0)
        if end_at <= local:
            end_at += timedelta(days=1)
        return (end_at - local).total_seconds()


    def window(self, name: str, size: int, wall: float) -> tuple[float, float]:
        """The send window ``name`` (of ``size`` seconds) that holds wall time ``wall``: the
        epoch seconds it starts and ends. A minute or an hour is UTC's; a day is the guid's
        calendar day in its time zone, whatever its length (23 or 25 hours where the clocks
        change), from one local midnight to the next (the earlier one where midnight comes
        twice), as the trigger ``guid_send_windows`` keeps it."""
        if name != "day":
            index = int(wall // size)
            return float(index * size), float((index + 1) * size)
        _, start, end = local_day(self.timezone, wall)
        return start, end

    def held_for(self, wall: float, windows: Mapping[str, Any] | None) -> float:
        """Seconds a batch send of the guid waits now by its limits alone (0: none holds it):
        its quiet hours, or a send window's cap (:meth:`capped_for`)."""
        return max(self.quiet_remaining(wall), self.capped_for(wall, windows))

    def stalled(self, since: datetime, now: datetime, after_s: float, windows: Mapping[str, Any] | None = None,
                job_gap_s: float = 0.0, penalty: float = 1.0) -> bool:
        """Whether work that has not moved since ``since`` is stuck rather than waiting for
        these limits: nothing holds the guid now (:meth:`held_for`), and ``after_s`` have gone
        by beyond its longest gap between two batch sends (its interval stretched by its
        rate-limit ``penalty``, as ``guid_leases`` keeps it; or its job's own interval per guid,
        ``job_gap_s``, when longer): a guid paced at one send an hour waits an hour. Time held
        does not count: from the end of the last hold (:meth:`released_at`) if that is later."""
        wall = now.timestamp()
        if self.held_for(wall, windows) > 0:
            return False
        quiet_since = max(since.timestamp(), self.released_at(wall, windows))
        gap = self.longest_gap_s + (max(1.0, penalty) - 1) * self.batch_interval_s
        return wall - quiet_since > after_s + max(gap, job_gap_s)

    def released_at(self, wall: float, windows: Mapping[str, Any] | None) -> float:
        """When the guid's last hold by its limits ended, at or before ``wall`` (epoch
        seconds; 0 for none known): its quiet hours' last end, or the end of a send window
        kept at its batch share of the cap."""
        ended = max((end for end in self._capped_ends(windows) if end <= wall), default=0.0)
        if self.quiet_hours is not None:
            tz = ZoneInfo(self.timezone)
            today = datetime.fromtimestamp(wall, tz).date()
            ends = (_clock_passes(day, self.quiet_hours[1], tz) for day in (today, today - timedelta(days=1)))
            ended = max(ended, max((end for end in ends if end <= wall), default=0.0))
        return ended

    def capped_for(self, wall: float, windows: Mapping[str, Any] | None) -> float:
        """Seconds until the end of the longest-lasting window whose sends (``windows``, as
        ``guid_leases`` keeps them: ``{"minute": [window index, sends, end], …}``, see
        :func:`kept_window`) reached the batch share of its cap; 0 when none has."""
        return max((end - wall for end in self._capped_ends(windows) if end > wall), default=0.0)

    def _capped_ends(self, windows: Mapping[str, Any] | None) -> list[float]:
        """The ends of the kept send windows whose sends reached the batch share of their cap."""
        ends = []
        for name, _ in WINDOWS:
            cap = getattr(self, f"per_{name}")
            kept = None if cap is None else kept_window(name, (windows or {}).get(name))
            if kept is not None and kept[0] >= self.batch_share(cap):
                ends.append(kept[1])
        return ends


def _clock_passes(day: date, at: dtime, tz: ZoneInfo) -> float:
    """The instant the clock of ``tz`` is past local time ``at`` on ``day`` for good (epoch
    seconds): where it reads ``at`` twice (the clocks going back), the second time; where it
    skips it (going forward), the jump."""
    naive = datetime.combine(day, at)
    first, second = (naive.replace(tzinfo=tz, fold=fold).timestamp() for fold in (0, 1))
    if first <= second:
        return second
    lo, hi = second, first  # skipped: the jump lies between, where the local reading passes ``at``
    while hi - lo > 1:
        mid = (lo + hi) / 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) >= naive:
            hi = mid
        else:
            lo = mid
    return hi


def local_day(zone: str, wall: float) -> tuple[date, float, float]:
    """The calendar day in time zone ``zone`` that holds wall time ``wall``: its date, and the
    epoch seconds it starts and ends, from one local midnight to the next (23 or 25 hours where
    the clocks change; the earlier midnight where it comes twice)."""
    tz = ZoneInfo(zone)
    day = datetime.fromtimestamp(wall, tz).date()
    start = datetime.combine(day, dtime(0), tz)
    return day, start.timestamp(), datetime.combine(day + timedelta(days=1), dtime(0), tz).timestamp()


DEFAULTS = Pacing()
NULLABLE = frozenset(name for name, f in Pacing.model_fields.items() if f.default is None)


def effective_pacing(every_guid: Any, own: Any, sender: Any = None) -> Pacing:
    """A guid's pacing as the senders apply it: its own overrides over every guid's (``*``)
    over the defaults of the sender holding it (``sender_limits``: its ``PACER_SENDER_*``
    settings) over the built-in ones. A layer the model does not take (a limit a later
    release dropped, a row that is not an object) is skipped as the senders skip it, and
    the layers under it still apply; of a sender's defaults, only the fields this release
    knows are read (a newer sender may publish more)."""
    known = {k: v for k, v in sender.items() if k in Pacing.model_fields} if isinstance(sender, Mapping) else None
    return _over(_over(_over(DEFAULTS, known), every_guid), own)


class Pacings:
    """Guids' pacing over one ``every_guid`` (the ``*`` overrides), made once for each distinct
    pair of a guid's own overrides and its sender's defaults: the guids of a job or a fleet
    mostly share a few."""

    def __init__(self, every_guid: Any) -> None:
        self.every_guid = every_guid
        self.made: dict[str, Pacing] = {}

    def __call__(self, own: Any, sender: Any) -> Pacing:
        key = json.dumps([own, sender], sort_keys=True, default=str)
        if key not in self.made:
            self.made[key] = effective_pacing(self.every_guid, own, sender)
        return self.made[key]


def _over(base: Pacing, layer: Any) -> Pacing:
    if not layer:
        return base
    try:
        return Pacing.model_validate(base.model_dump() | dict(layer))
    except (ValueError, TypeError):
        return base


class JobLimitsPatch(BaseModel):
    """Fields to override for one job (row ``job:<job_id>``): its share of each guid's batch
    sends against the other jobs of the same priority (``weight``, default 1), and its own
    rate per guid (``min_interval_s``: after each of its sends the guid's next batch send
    waits at least this long)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    weight: Annotated[float, Field(gt=0, le=1000)] | None = None
    min_interval_s: Annotated[float, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _no_null(self) -> JobLimitsPatch:
        for name in self.model_fields_set:
            if getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null")
        return self


def parse_limits(values: dict[str, Any], target: str = "*") -> dict[str, Any]:
    """Validated overrides for ``target`` (a guid, ``*``, or ``job:<job_id>``), JSON-ready,
    or :class:`ValueError` with one readable sentence."""
    job = target.startswith("job:")
    model: type[Pacing] | type[JobLimitsPatch] = JobLimitsPatch if job else Pacing
    if not values:
        raise ValueError("invalid limits: give at least one limit to change")
    nulls = sorted(k for k, v in values.items() if v is None and k in model.model_fields and k not in NULLABLE)
    if nulls and not job:
        raise ValueError(f"invalid limits: {', '.join(nulls)} cannot be null; only {', '.join(sorted(NULLABLE))} can")
    try:
        patch = model.model_validate(values)
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown limit (known: {', '.join(model.model_fields)})"
            parts.append(f"{where}: {msg}" if where else msg)
        raise ValueError("invalid limits: " + "; ".join(parts)) from None
    given = patch.model_dump(mode="json", include=set(values))
    return {k: given[k] for k in values}
