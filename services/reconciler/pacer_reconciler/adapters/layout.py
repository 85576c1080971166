"""The cursors of a segment layout (``PACER_RECONCILER_SEGMENTS`` = n): one per segment,
``reconciler/<s>of<n>``, created once for the whole layout.

An event must be projected exactly once, so a new layout may start only where every old
cursor stands: the single leader's cursor (``reconciler``, before segments existed) or the
cursors of another segment count. The new cursors start at the furthest old position, and
only if no old segment has an event between its own cursor and there; the old cursors are
then removed in the same transaction. Otherwise :class:`LayoutBlocked` says what to do
(docs/reliability.md, "Changing the segment count").
"""

from __future__ import annotations

import logging
import re
from typing import LiteralString, cast

from pacer_common.db.errors import with_retry
from pacer_common.db.pool import Pool, one
from pacer_common.db.sql import loader
from pacer_reconciler.domain.segments import segment_names

log = logging.getLogger(__name__)
_sql = loader("pacer_reconciler.adapters.sql")
_SEGMENT = re.compile(r"/(\d+)of(\d+)$")


class LayoutBlocked(Exception):
    """The segment count changed while an old segment still had events to apply."""


def segment_sql(name: str, n: int) -> LiteralString:
    """``<name>.sql`` with a guid's segment written in as the index expression has it (the
    count a literal), or as 0 when there is one segment (no filter, the plain log order)."""
    n = int(n)
    expr = f"((hashtext(guid) & 2147483647) %% {n})" if n > 1 else "0"
    order = f"((hashtext(item_events.guid) & 2147483647) %% {n}), " if n > 1 else ""
    return cast(LiteralString, _sql(name).replace("{guid_segment}", expr).replace("{segment_order}", order))


def _key(xid: str, seq: int) -> tuple[int, int]:
    return int(xid), seq


async def adopt_layout(pool: Pool, prefix: str, n: int) -> None:
    """Make sure the n cursors of this layout exist (see the module text)."""
    names = list(segment_names(prefix, n).values())

    async def work() -> None:
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(_sql("layout_lock"))
            rows = await (await conn.execute(_sql("layout_cursors"), {"prefix": prefix})).fetchall()
            have = {r["name"] for r in rows}
            if all(name in have for name in names):
                return
            old = [r for r in rows if r["name"] not in names]
            end = max((_key(r["xid"], r["last_seq"]) for r in old), default=(0, 0))
            for r in old:
                if _key(r["xid"], r["last_seq"]) == end:
                    continue
                m = _SEGMENT.search(r["name"])
                segment, count = (int(m[1]), int(m[2])) if m else (0, 1)
                row = await one(conn, segment_sql("layout_gap", count), {
                    "from_xid": r["xid"], "from_seq": r["last_seq"], "to_xid": str(end[0]), "to_seq": end[1],
                    "segment": segment})
                if row["gap"]:
                    raise LayoutBlocked(
                        f"cursor {r['name']} is behind {end} with events still to apply: the segment count changed "
                        f"to {n} before every reconciler of the old layout caught up (docs/reliability.md, "
                        "\"Changing the segment count\")")
            await conn.execute(_sql("layout_create"), {"names": names, "xid": str(end[0]), "seq": end[1]})
            await conn.execute(_sql("layout_drop"), {"names": [r["name"] for r in old]})

    await with_retry(work)
    if n > 1:
        async with pool.connection() as conn:
            row = await one(conn, _sql("layout_index"), {"name": f"item_events_segment_{n}"})
        if not row["present"]:
            log.error("index item_events_segment_%d is missing or not yet valid: each tail round scans the rest of"
                      " the event log; `pacer migrate --event-segments %d` builds it online (docs/reliability.md,"
                      " \"Changing the segment count\", step 1)", n, n)
