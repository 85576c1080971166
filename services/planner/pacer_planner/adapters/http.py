"""The audience service over HTTP: ``GET <url>?cursor=<c>&limit=<n>``, JSON back.

Every way a fetch can fail becomes a :class:`TargetFetchError` here, with a message fit
for an operator (no URL query string: it may carry a token). Whether and when to retry is
the pager's business.
"""

from __future__ import annotations

from typing import Any

import httpx

from pacer_common import tracing
from pacer_planner.domain.targets import TargetFetchError


class HttpTargetSource:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client  # owned by the composition root: timeouts, limits, closing

    async def fetch(self, url: str, cursor: str | None, limit: int) -> Any:
        target = httpx.URL(url).copy_set_param("limit", str(limit))
        if cursor is not None:
            target = target.copy_set_param("cursor", cursor)
        try:
            resp = await self.client.get(target, headers={"accept": "application/json", **tracing.http_headers()})
        except httpx.HTTPError as exc:
            raise TargetFetchError(f"request failed: {type(exc).__name__}{f': {exc}' if str(exc) else ''}") from exc
        if resp.status_code != 200:
            raise TargetFetchError(f"HTTP {resp.status_code} {resp.reason_phrase}".rstrip())
        try:
            return resp.json()
        except ValueError as exc:
            raise TargetFetchError(f"response is not JSON: {exc}") from exc
        except RecursionError as exc:
            # json's decoder recurses per nesting level: past Python's recursion limit it gives
            # up with this instead of ValueError. An unreadable page like any other, or the pager
            # would not count the attempt and would fetch the page again at every sweep.
            raise TargetFetchError("response is not JSON Pacer can read: nested too deeply") from exc
