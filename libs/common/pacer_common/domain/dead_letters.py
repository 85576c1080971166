"""A dead-letter record as Pacer reads it back: where it is, when, why, whose.

The planner (job requests) and the callback intake (callbacks) put what they refuse on a DLQ
topic as it came, with headers saying why (:data:`REASON_HEADER`), when, which service refused
it and, where it is known, the tenant. ``pacer dead-letters`` and the Control API read the
records back through this one shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pacer_common.domain.requests import DEFAULT_TENANT, TENANT_NAME

REASON_HEADER, AT_HEADER, SOURCE_HEADER = "pacer-error-reason", "pacer-error-at", "pacer-error-source"
TENANT_HEADER = "pacer-tenant"
REPUBLISHED_HEADER = "pacer-republished-from"

Queue = Literal["requests", "callbacks"]
# A body read for its tenant when a record carries no tenant header (records written before
# the planner added it): a larger one is not parsed, and only an unscoped caller sees it.
MAX_TENANT_PARSE_BYTES = 1_048_576
# Records of each partition a search (by tenant or key) looks through.
SEARCH_DEPTH = 1_000


@dataclass(frozen=True)
class DeadLetter:
    """One record. ``value`` is all of it when read on its own; in a list it is kept only
    where it tells the tenant (empty otherwise: a list of large refused requests must not hold
    them all), and ``size`` is always the record's."""

    partition: int
    offset: int
    at: datetime
    key: bytes | None
    value: bytes
    headers: dict[str, str]
    size: int

    @property
    def where(self) -> str:
        return f"{self.partition}:{self.offset}"

    @property
    def reason(self) -> str:
        return self.headers.get(REASON_HEADER, "")

    @property
    def source(self) -> str:
        return self.headers.get(SOURCE_HEADER, "")

    @property
    def tenant(self) -> str | None:
        """The tenant the record belongs to: its header, else the tenant its body names (a job
        request without one is the default tenant's), else None (not a JSON object, or too
        large to read for it)."""
        named = self.headers.get(TENANT_HEADER)
        return named if named else tenant_named(self.value)

    @property
    def key_text(self) -> str | None:
        return None if self.key is None else self.key.decode(errors="replace")

    def summary(self) -> dict[str, object]:
        return {"at": self.at.isoformat(timespec="seconds"), "where": self.where, "source": self.source,
                "tenant": self.tenant, "key": self.key_text, "bytes": self.size, "reason": self.reason}


def tenant_named(value: bytes) -> str | None:
    """The tenant a job request's bytes name, best effort: None unless they are a JSON object
    of at most :data:`MAX_TENANT_PARSE_BYTES` whose ``tenant`` is absent or a tenant's name
    (anything else in it is no tenant, and never a header)."""
    if len(value) > MAX_TENANT_PARSE_BYTES:
        return None
    try:
        body = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    tenant = body.get("tenant", DEFAULT_TENANT)
    return tenant if isinstance(tenant, str) and re.fullmatch(TENANT_NAME, tenant) else None


def matching(letters: Iterable[DeadLetter], tenant: str | None = None, key: str | None = None) -> list[DeadLetter]:
    """The records of ``tenant`` (if given) with ``key`` (if given: a job request's id as its
    publisher keyed it), in the order given."""
    return [d for d in letters if (tenant is None or d.tenant == tenant) and (key is None or d.key_text == key)]


def read_depth(last: int, tenant: str | None = None, key: str | None = None) -> int:
    """How many records of each partition to read for the newest ``last`` of a list: ``last``
    itself, or :data:`SEARCH_DEPTH` (at least) when it is filtered by ``tenant`` or ``key``."""
    return max(last, SEARCH_DEPTH) if tenant is not None or key is not None else last
