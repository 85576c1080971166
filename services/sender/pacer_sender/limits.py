"""Each guid's current limits: the sender's defaults, overridden live from ``guid_limits``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from pacer_common.lifecycle import every
from pacer_sender.domain.pacing import Limits

log = logging.getLogger(__name__)

# A refresh of the hot limits that keeps failing is tried at least this often.
REFRESH_BACKOFF_MAX_S = 30.0


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

    async def keep_fresh(self, stop: asyncio.Event, every_s: float, on_error: Callable[[], None] | None = None) -> None:
        """:meth:`refresh` every ``every_s`` until ``stop``. A round that fails, whatever the
        error (the database away, a row it cannot read, a bug), is logged and counted
        (``on_error``) and the loop goes on, further apart while it keeps failing (up to
        ``REFRESH_BACKOFF_MAX_S``): hot changes apply again once a round gets through."""
        await every(self.refresh, stop, every_s, "reading hot limits (guid_limits)", on_error,
                    backoff_max_s=REFRESH_BACKOFF_MAX_S)

