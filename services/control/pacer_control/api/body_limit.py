"""A cap on request bodies, before anything reads them (pure ASGI).

FastAPI reads and parses a route's whole body before the route's dependencies run, the
token check among them: without a cap, a request with no token and a body of hundreds of MiB
was held in memory (several times over, parsed) before it was answered 401, and one such
request took a control pod past its memory limit. This middleware answers ``413`` at once
when ``Content-Length`` says more than the limit, and counts the bytes of a body sent without
it (chunked) as the app reads them: past the limit it answers ``413`` and the app reads no
more. A path may have a limit of its own, and its own words for it (the dry run's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

SETTING = "PACER_CONTROL_MAX_BODY_BYTES"


class BodyTooLarge(Exception):
    """Raised into the app from ``receive`` once a streamed body passes the limit (already answered 413)."""


class BodyLimit:
    """Refuse (413) a request whose body is larger than ``limit`` bytes; ``paths`` maps a path to
    a limit of its own and what the refusal says of it (``"the largest …, set by SETTING"``)."""

    def __init__(self, app: ASGIApp, limit: int, paths: Mapping[str, tuple[int, str]] | None = None) -> None:
        self.app = app
        self.limit = limit
        self.paths = dict(paths or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, where = self.paths.get(scope["path"], (self.limit, f"the control service's limit (set by {SETTING})"))
        length = _content_length(scope)
        if length is not None and length > limit:
            await _refuse(send, limit, where)
            return

        received = 0
        started = answered = False

        async def counted_receive() -> Message:
            nonlocal received, answered
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if not started:  # the app has not answered yet: the 413 is its answer
                        await _refuse(send, limit, where)
                        answered = True
                    raise BodyTooLarge(f"the request body passed {limit} bytes")
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if answered:
                return  # whatever the app makes of the refused body, the caller has its 413
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except BodyTooLarge:
            if not answered:
                raise


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # not a number: the server refuses it; the streamed count still applies
    return None


async def _refuse(send: Send, limit: int, where: str) -> None:
    detail = f"the request body is larger than {limit:,} bytes, {where}; the request was not carried out"
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
