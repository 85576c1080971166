"""Bearer tokens and the permission table, applied to every route.

A route declares its action once — ``@router.post(path, **guard("jobs.pause", 404, 409))`` —
which both enforces it and publishes it in the OpenAPI document as ``x-pacer-action`` (and
the least role as ``x-pacer-role``), where the authorization test finds it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pacer_control.api.schemas import Problem
from pacer_control.core import Control
from pacer_control.domain.permissions import RULES, Action, Principal

bearer = HTTPBearer(auto_error=False, description="an API token: `pacer token create` or POST /api/v1/tokens")

_PROBLEMS = {
    401: "missing, unknown or revoked token",
    403: "the token's role may not do this",
    404: "no such target",
    409: "not allowed in the target's current state; the detail says why",
    413: "the request body is larger than the service takes",
    422: "the request is not valid; the detail says which field and why",
    503: "the database or Kafka cannot be reached right now; try again",
}


def control(request: Request) -> Control:
    return request.app.state.control


def guard(action: Action, *statuses: int, tenant_filtered: bool = False) -> dict[str, Any]:
    """Route keyword arguments that require ``action`` of the caller (see module doc).

    A token scoped to tenants is checked against the job or item the path names (not one of
    its tenants': 404, as if it did not exist); a route naming neither is refused to it (403)
    unless ``tenant_filtered`` (the route itself shows it only its tenants' rows, or nothing
    stored at all)."""

    async def check(request: Request,
                    _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]) -> None:
        ctl = control(request)
        principal = await ctl.authenticate(request.headers.get("authorization"))
        ctl.authorize(principal, action)
        if principal.tenants is not None:
            params = request.path_params
            target = next(((kind, params[f"{kind}_id"]) for kind in ("job", "item") if f"{kind}_id" in params), None)
            await ctl.authorize_scope(principal, action, target, tenant_filtered)
        request.state.principal = principal

    responses: dict[int | str, dict[str, Any]] = {
        code: {"model": Problem, "description": _PROBLEMS[code]} for code in (401, 403, *statuses)}
    return {
        "dependencies": [Depends(check)],
        "openapi_extra": {"x-pacer-action": action, "x-pacer-role": RULES[action].role.value},
        "responses": responses,
    }


def caller(request: Request) -> Principal:
    """The authenticated caller (set by the route's guard, which runs first)."""
    return request.state.principal


Caller = Annotated[Principal, Depends(caller)]
Ctl = Annotated[Control, Depends(control)]
