"""Tenants (one per gateway token): list, create, change, delete. Secrets are write-only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from pacer_control.api.auth import Caller, Ctl, guard
from pacer_control.api.responses import respond
from pacer_control.api.schemas import ActionBody, ActionResponse, TenantBody, TenantChange, TenantName, TenantView

router = APIRouter(tags=["tenants"])
NamePath = Annotated[TenantName, Path(description="the tenant's name")]


@router.get("/tenants", response_model=list[TenantView], summary="Tenants, without their secrets",
            **guard("tenants.view"))
async def list_tenants(ctl: Ctl) -> Any:
    return await ctl.tenants()


@router.post("/tenants", response_model=TenantView, status_code=201,
             summary="Create a tenant: its gateway URL, credential, callback secret and quotas",
             **guard("tenants.manage", 409, 422))
async def create_tenant(body: TenantBody, ctl: Ctl, who: Caller) -> Any:
    return await ctl.create_tenant(body.name, body.model_dump(exclude={"name"}), who)


@router.patch("/tenants/{name}", response_model=TenantView,
              summary="Change a tenant's fields (left out: unchanged; null: cleared); senders use it within seconds",
              **guard("tenants.manage", 404, 422))
async def update_tenant(name: NamePath, body: TenantChange, ctl: Ctl, who: Caller) -> Any:
    return await ctl.update_tenant(name, {k: getattr(body, k) for k in body.model_fields_set}, who, None)


@router.delete("/tenants/{name}", response_model=ActionResponse,
               summary="Delete a tenant no job names ('default' is kept)", **guard("tenants.manage", 404, 409, 422))
async def delete_tenant(name: NamePath, ctl: Ctl, who: Caller, body: ActionBody | None = None) -> Any:
    return respond(await ctl.delete_tenant(name, who, body.reason if body else None))
