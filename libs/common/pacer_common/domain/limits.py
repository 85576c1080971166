"""What may be written to ``guid_limits``: the pacing fields a sender reads, validated.

A hot limit change (``pacer limits`` or the Control API) is checked here before it is
stored, so a typo or an impossible value is refused at the door instead of being ignored
by every sender that reads it. The fields mirror the sender's ``Limits`` (a unit test keeps
the two in step); only the window caps and quiet hours may be set to ``null`` (no cap, no
quiet hours).
"""

from __future__ import annotations

from datetime import time as dtime
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

Cap = Annotated[int, Field(gt=0)] | None

def parse_quiet_hours(text: str) -> tuple[dtime, dtime]:
    """``"22:00-08:00"`` → (start, end), local times; the window may wrap midnight."""
    start, sep, end = text.partition("-")
    try:
        if not sep:
            raise ValueError
        return dtime.fromisoformat(start.strip()), dtime.fromisoformat(end.strip())
    except ValueError:
        raise ValueError(f"quiet_hours must look like 22:00-08:00, not {text!r}") from None


NULLABLE = frozenset({"per_minute", "per_hour", "per_day", "quiet_hours"})


class LimitsPatch(BaseModel):
    """Fields to override for one guid (or ``*``); unset fields keep their current value."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    min_interval_s: Annotated[float, Field(ge=0)] | None = None
    jitter_s: Annotated[float, Field(ge=0)] | None = None
    jitter_dist: Literal["uniform", "exponential"] | None = None
    online_reserve: Annotated[float, Field(ge=0, lt=1)] | None = None
    per_minute: Cap = None
    per_hour: Cap = None
    per_day: Cap = None
    quiet_hours: Annotated[str, Field(description="HH:MM-HH:MM local time, may wrap midnight")] | None = None
    timezone: str | None = None
    rate_limited_penalty: Annotated[float, Field(ge=1)] | None = None
    penalty_decay: Annotated[float, Field(gt=0, le=1)] | None = None
    max_penalty: Annotated[float, Field(ge=1)] | None = None
    shed: bool | None = None
    online_yield_s: Annotated[float, Field(ge=0)] | None = None

    @field_validator("quiet_hours")
    @classmethod
    def _quiet_hours(cls, v: str | None) -> str | None:
        if v is not None:
            parse_quiet_hours(v)
        return v

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {v!r} (use an IANA name such as Asia/Shanghai)") from None
        return v

    @model_validator(mode="after")
    def _no_null_for_required(self) -> LimitsPatch:
        for name in self.model_fields_set - NULLABLE:
            if getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null; only {', '.join(sorted(NULLABLE))} can")
        return self

    def overrides(self) -> dict[str, Any]:
        """Only the fields given, JSON-ready: what is merged into ``guid_limits.limits``."""
        return self.model_dump(mode="json", exclude_unset=True)


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

    def overrides(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


def parse_limits(values: dict[str, Any], target: str = "*") -> dict[str, Any]:
    """Validated overrides for ``target`` (a guid, ``*``, or ``job:<job_id>``), or
    :class:`ValueError` with one readable sentence."""
    model: type[LimitsPatch] | type[JobLimitsPatch] = JobLimitsPatch if target.startswith("job:") else LimitsPatch
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
    out = patch.overrides()
    if not out:
        raise ValueError("invalid limits: give at least one limit to change")
    return out
