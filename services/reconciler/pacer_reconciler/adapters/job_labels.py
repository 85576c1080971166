"""The tenant and request trace context of each job, which every outcome of the job carries in
its headers (``pacer-tenant``, ``traceparent``).

Neither changes once the job is stored, so a process reads them once per job and keeps them:
one small query per batch that names a job not seen before, instead of two lookups per event
in the tail's read (most of that read's cost, measured in docs/performance.md). The oldest
entries are forgotten past ``capacity`` jobs; a forgotten job is simply read again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pacer_common.db.sql import loader

_sql = loader("pacer_reconciler.adapters.sql")

Labels = tuple[str | None, str | None]  # (tenant, traceparent)
_NONE: Labels = (None, None)


class JobLabels:
    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._known: dict[str, Labels] = {}

    async def label(self, conn: Any, rows: Sequence[dict[str, Any]]) -> None:
        """Set ``tenant`` and ``traceparent`` on each event row from its job (None for a job
        that no longer exists), reading on ``conn`` the jobs not yet known."""
        missing = sorted({r["job_id"] for r in rows} - self._known.keys())
        if missing:
            for r in await (await conn.execute(_sql("job_labels"), {"jobs": missing})).fetchall():
                self._known[r["job_id"]] = (r["tenant"], r["traceparent"])
            while len(self._known) > self.capacity:
                del self._known[next(iter(self._known))]
        for r in rows:
            r["tenant"], r["traceparent"] = self._known.get(r["job_id"], _NONE)
