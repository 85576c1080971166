"""Each guid's current limits: the sender's defaults, overridden live from ``guid_limits``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from pacer_common.db.errors import TransientError
from pacer_sender.domain.pacing import Limits

log = logging.getLogger(__name__)


class LimitsSource(Protocol):
    async def changed_since(self, after: int | None) -> list[tuple[str, dict[str, Any], int]]:
        """(guid, overrides, cursor) of every row changed past cursor ``after``, in commit
        order; a change committed late must not be passed over (the cursor is not a clock)."""
        ...


def apply_overrides(base: Limits, overrides: dict[str, Any]) -> Limits:
    """``base`` with the given fields replaced, validated as a whole; unknown fields and
    values out of bounds are refused (``ValueError``)."""
    return Limits.model_validate(base.model_dump() | overrides)


class LimitsBook:
    def __init__(self, defaults: Limits, source: LimitsSource,
                 on_change: Callable[[list[str]], None] | None = None) -> None:
        self.defaults = defaults
        self.source = source
        self.on_change = on_change or (lambda guids: None)  # e.g. wake those guids' workers
        self._overrides: dict[str, dict[str, Any]] = {}
        self._resolved: dict[str, Limits] = {}
        self._cursor: int | None = None

    def job_interval(self, job_id: str) -> float | None:
        """A job's own minimum interval per guid (row ``job:<job_id>``, field min_interval_s)."""
        found = self._job_field(job_id, "min_interval_s")
        return None if found is None else max(0.0, found)

    def job_weight(self, job_id: str) -> float | None:
        """A job's weight against the other jobs of its priority on a guid (field weight)."""
        return self._job_field(job_id, "weight")

    def _job_field(self, job_id: str, name: str) -> float | None:
        found = self._overrides.get(f"job:{job_id}", {}).get(name)
        try:
            return None if found is None else float(found)
        except (TypeError, ValueError):
            return None

    def __call__(self, guid: str) -> Limits:
        found = self._resolved.get(guid)
        return found if found is not None else self._resolved.get("*", self.defaults)

    async def refresh(self) -> int:
        changed = await self.source.changed_since(self._cursor)
        for guid, overrides, cursor in changed:
            self._overrides[guid] = overrides
            self._cursor = cursor
        if changed:
            base = self.defaults
            if "*" in self._overrides:
                base = self._safe(self.defaults, "*")
            self._resolved = {"*": base} | {g: self._safe(base, g) for g in self._overrides
                                              if g != "*" and not g.startswith("job:")}
            log.info("limits changed for %d guid(s)", len(changed))
            self.on_change([guid for guid, _, _ in changed])
        return len(changed)

    def _safe(self, base: Limits, guid: str) -> Limits:
        try:
            return apply_overrides(base, self._overrides[guid])
        except (ValueError, TypeError) as exc:
            log.error("ignoring bad limits for guid %s: %s", guid, exc)
            return base

    async def keep_fresh(self, stop: asyncio.Event, every_s: float) -> None:
        while not stop.is_set():
            try:
                await self.refresh()
            except TransientError:
                log.exception("limits refresh failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every_s)

