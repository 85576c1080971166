"""An action's outcome as an HTTP answer: done/noop → 200, conflict → 409, not_found → 404."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi.responses import JSONResponse

from pacer_control.core import as_dict
from pacer_control.domain.outcomes import ActionResult


def respond(result: ActionResult) -> dict[str, Any] | JSONResponse:
    body = {**as_dict(result), "changed": result.outcome == "done"}
    if result.outcome in ("done", "noop"):
        if result.outcome == "noop" and "nothing changed" not in result.message:
            body["message"] = f"{result.message}; nothing changed"
        return body
    status = 404 if result.outcome == "not_found" else 409
    return JSONResponse({"detail": result.message, **body}, status_code=status)


def next_cursor(rows: Sequence[dict[str, Any]], limit: int, key: str) -> Any:
    """The key of the last row when the page is full (there may be more), else None."""
    return rows[-1][key] if rows and len(rows) >= limit else None
