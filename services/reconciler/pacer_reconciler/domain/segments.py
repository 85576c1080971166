"""Segments of the reconciler's work and the rule that shares them among replicas.

A guid belongs to one of ``n`` segments by hash (computed in SQL:
``(hashtext(guid) & 2147483647) % n``); each segment is owned through its own lease, so
every event, sweep and verification of a guid is handled by one replica at a time.

The balancing rule, applied by each replica on every lease round (every TTL/3):

* ``fair = ceil(n / live replicas)``; a replica counts as live while its membership
  lease is (it is renewed with its segments, so it lapses with them).
* Holding more than ``fair``: release the surplus, highest segment numbers first (segment 0
  carries the singleton duties and moves last).
* Holding fewer: claim free or expired segments, lowest first, up to ``fair``.

Since ``live * fair >= n`` every segment finds an owner; once every replica has run a round
after a membership change, none holds more than ``ceil(n / live)``.
"""

from __future__ import annotations

import math
from collections.abc import Set
from dataclasses import dataclass

SINGLETON_SEGMENT = 0  # its owner also runs the duties that are not per guid


@dataclass(frozen=True)
class Plan:
    claim: tuple[int, ...] = ()
    release: tuple[int, ...] = ()


def fair_share(n: int, replicas: int) -> int:
    return math.ceil(n / max(1, replicas))


def balance(n: int, mine: Set[int], taken: Set[int], replicas: int) -> Plan:
    """What one replica does this round. ``mine``: segments it holds; ``taken``: segments
    other replicas hold live; ``replicas``: live replicas, this one included."""
    fair = fair_share(n, replicas)
    if len(mine) > fair:
        return Plan(release=tuple(sorted(mine, reverse=True)[: len(mine) - fair]))
    free = [s for s in range(n) if s not in mine and s not in taken]
    return Plan(claim=tuple(free[: fair - len(mine)]))


def segment_names(prefix: str, n: int) -> dict[int, str]:
    """The lease (and cursor) name of each segment; the count is part of the name, so two
    layouts never share a row."""
    return {s: f"{prefix}/{s}of{n}" for s in range(n)}
