"""The Control API's HTTP surface: FastAPI routers under /api/v1, errors as {"detail": …}."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import FastAPI

from pacer_control.api import admin, console, dead_letters, errors, guids, jobs, tenants
from pacer_control.core import Control

PREFIX = "/api/v1"

DESCRIPTION = """Operate Pacer: list and inspect jobs, pause, resume, cancel or terminate them, retry
failed items, hold guids, adjust rates, read the audit log, read dead letters and send a refused job request again.

Authenticate with `Authorization: Bearer <token>` (`pacer token create --name NAME --role ROLE`).
Roles are cumulative — operator < tech_admin < admin; each operation names its action
(`x-pacer-action`) and the least role allowed (`x-pacer-role`). Every change is written to the
audit log, as `token:<name>`, in the same transaction as the change itself."""


def create_api(control: Control,
               lifespan: Callable[[FastAPI], AbstractAsyncContextManager[Any]] | None = None) -> FastAPI:
    app = FastAPI(title="Pacer Control API", version="1", description=DESCRIPTION,
                  openapi_url=f"{PREFIX}/openapi.json", docs_url=None, redoc_url=None,
                  lifespan=lifespan)
    app.state.control = control
    errors.install(app)
    for router in (jobs.router, guids.router, admin.router, tenants.router, dead_letters.router):
        app.include_router(router, prefix=PREFIX)
    # Swagger UI with its assets served from here: it works without the internet.
    app.add_api_route(f"{PREFIX}/docs", lambda: console.docs_page(f"{PREFIX}/openapi.json"), include_in_schema=False)
    console.install(app)
    return app
