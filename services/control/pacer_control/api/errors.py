"""Every error as ``{"detail": "<one clear sentence>"}``."""

from __future__ import annotations

import logging
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from pacer_control.domain.errors import (
    Conflict,
    ControlError,
    Forbidden,
    Invalid,
    NotFound,
    TooLarge,
    Unauthorized,
    Unavailable,
)

log = logging.getLogger("pacer.control")

STATUS: dict[type[ControlError], int] = {
    Unauthorized: 401, Forbidden: 403, NotFound: 404, Conflict: 409, TooLarge: 413, Invalid: 422, Unavailable: 503,
}


def describe(exc: RequestValidationError, request: Request, limit: int = 5) -> str:
    """``where: what`` for the first few errors, e.g. ``body.max_sends: Input should be greater than 0``.

    A dry run speaks like the planner's dead-letter reasons (``invalid job request: targets…``).
    """
    dry_run = request.url.path.endswith("/dry-run")
    parts = []
    errors = exc.errors()
    for err in errors[:limit]:
        loc = [str(p) for p in err.get("loc", ())]
        if dry_run and loc[:1] == ["body"]:
            loc = loc[1:]
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{'.'.join(loc) or '(request)'}: {msg}")
    if len(errors) > limit:
        parts.append(f"… and {len(errors) - limit} more")
    return ("invalid job request: " if dry_run else "invalid request: ") + "; ".join(parts)


def install(app: FastAPI) -> None:
    @app.exception_handler(ControlError)
    async def control_error(request: Request, exc: ControlError) -> JSONResponse:
        status = next(code for cls, code in STATUS.items() if isinstance(exc, cls))
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A defect, not the caller's fault: said as one sentence too, with an id that finds the
        # traceback in the log (the caller's detail never carries internals).
        error_id = uuid.uuid4().hex[:12]
        log.error("unexpected error answering %s %s", request.method, request.url.path, exc_info=exc,
                  extra={"error_id": error_id})
        return JSONResponse({"detail": f"internal error {error_id}: the control service's log has it (search "
                                       f"error_id {error_id}); the request may be retried"}, status_code=500)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg")), "type": str(e.get("type"))}
                  for e in exc.errors()]
        return JSONResponse({"detail": describe(exc, request), "errors": errors}, status_code=422)
