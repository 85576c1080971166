"""A customer as the gateway's ``/customer/detail`` answers it (seed 000 §12: a customer sync
writes Pacer's copy under a version check, so concurrent syncs take effect once and the
newest version wins)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from pacer_common.domain.requests import NO_NUL

Text = Annotated[str, StringConstraints(max_length=2000, pattern=NO_NUL)]


class Customer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)
    customer_id: Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=NO_NUL)] = Field(
        alias="customerId")
    name: Text = ""
    remark: Text = ""
    tags: Annotated[list[Annotated[str, StringConstraints(max_length=128, pattern=NO_NUL)]], Field(max_length=1000)] = []
    version: Annotated[int, Field(ge=0, le=2**63 - 1)]
