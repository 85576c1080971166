"""The audience service over HTTP: ``GET <url>?cursor=<c>&limit=<n>``, JSON back.

Every way a fetch can fail becomes a :class:`TargetFetchError` here, with a message fit
for an operator (no URL query string: it may carry a token). Whether and when to retry is
the pager's business.

One fetch is bounded in time and in size: the whole answer, headers and body, must arrive
within ``deadline_s`` (the client's own timeout is per read: an answer that trickles in
would pass it and hold the pager, its paging lease and its slot for as long as it trickles),
and the body is read as it streams in and refused past ``max_bytes`` (decoded), before it
is parsed, so an audience cannot fill the planner's memory with one page: a compressed body is
decoded here, at most ``max_bytes`` at a time, never a whole inflated chunk.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from typing import Any

import httpx

from pacer_common import tracing
from pacer_planner.domain.targets import MAX_PAGE_BYTES, TargetFetchError


class HttpTargetSource:
    def __init__(self, client: httpx.AsyncClient, *, deadline_s: float = 10.0,
                 max_bytes: int = MAX_PAGE_BYTES) -> None:
        self.client = client  # owned by the composition root: timeouts, limits, closing
        self.deadline_s = deadline_s
        self.max_bytes = max_bytes

    async def fetch(self, url: str, cursor: str | None, limit: int) -> Any:
        target = httpx.URL(url).copy_set_param("limit", str(limit))
        if cursor is not None:
            target = target.copy_set_param("cursor", cursor)
        try:
            async with asyncio.timeout(self.deadline_s):
                body = await self._body(target)
        except TimeoutError:
            raise TargetFetchError(f"no whole answer within {self.deadline_s:g} s (the deadline of one page "
                                   "request)") from None
        try:
            return json.loads(body)
        except ValueError as exc:
            raise TargetFetchError(f"response is not JSON: {exc}") from exc
        except RecursionError as exc:
            # json's decoder recurses per nesting level: past Python's recursion limit it gives
            # up with this instead of ValueError. An unreadable page like any other, or the pager
            # would not count the attempt and would fetch the page again at every sweep.
            raise TargetFetchError("response is not JSON Pacer can read: nested too deeply") from exc

    async def _body(self, target: httpx.URL) -> bytes:
        too_large = f"response is over {self.max_bytes} bytes, the most one page may have"
        try:
            async with self.client.stream("GET", target, headers={"accept": "application/json",
                                                                  "accept-encoding": "gzip, deflate",
                                                                  **tracing.http_headers()}) as resp:
                if resp.status_code != 200:
                    raise TargetFetchError(f"HTTP {resp.status_code} {resp.reason_phrase}".rstrip())
                declared = resp.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > self.max_bytes:
                    raise TargetFetchError(f"{too_large} (Content-Length: {declared})")
                if resp.is_stream_consumed:  # read whole before it came here (an in-memory transport), decoded
                    if len(resp.content) > self.max_bytes:
                        raise TargetFetchError(too_large)
                    return resp.content
                decoder = _decoder(resp.headers.get("content-encoding", ""))
                chunks, size = [], 0
                async for raw in resp.aiter_raw():
                    data = raw
                    while data:  # decoded a bounded piece at a time: one raw chunk may inflate 1000-fold
                        piece = decoder.decompress(data, self.max_bytes - size + 1) if decoder else data
                        data = decoder.unconsumed_tail if decoder else b""
                        size += len(piece)
                        if size > self.max_bytes:
                            raise TargetFetchError(too_large)
                        chunks.append(piece)
                if decoder is not None:
                    chunks.append(decoder.flush())
                    if size + len(chunks[-1]) > self.max_bytes:
                        raise TargetFetchError(too_large)
                return b"".join(chunks)
        except httpx.HTTPError as exc:
            raise TargetFetchError(f"request failed: {type(exc).__name__}{f': {exc}' if str(exc) else ''}") from exc
        except zlib.error as exc:
            raise TargetFetchError(f"response body does not decode as its Content-Encoding says: {exc}") from exc


def _decoder(encoding: str) -> Any:
    """A zlib decoder for a body's ``Content-Encoding`` (None: as it came). Pacer decodes a
    page itself, a bounded piece at a time, rather than through the client, which inflates
    each chunk it reads whole."""
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return None
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if name == "deflate":
        return zlib.decompressobj()
    raise TargetFetchError(f"response Content-Encoding {encoding!r} is not one Pacer reads (gzip, deflate)")
