"""Authorization matrix: every operation of the Control API × {no token, operator, tech_admin,
admin}, checked against the one permission table. An operation without a rule fails here."""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fastapi.routing import APIRoute

from pacer_common.db.pool import new_pool, open_pool
from pacer_common.domain.tokens import RANK, Role
from pacer_common.settings import KafkaSettings
from pacer_control.adapters.kafka import KafkaDeadLetters
from pacer_control.app import build_app
from pacer_control.domain.permissions import FIELD_ACTIONS, RULES
from pacer_dev.infra import Infra
from tests.conftest import TEMPLATE, with_db
from tests.integration.control_support import make_tokens

# Routes that need no token: probes and the API's own description.
PUBLIC = {"/healthz", "/readyz", "/metrics", "/api/v1/openapi.json", "/api/v1/docs",
          "/api/v1/docs/oauth2-redirect"}
PARAMS = {"job_id": str(uuid.uuid4()), "item_id": str(uuid.uuid4()), "shard_id": "1", "guid": "g-matrix",
          "name": "nobody", "queue": "requests", "partition": "0", "offset": "0"}


def _offline_app() -> Any:
    # The OpenAPI document needs no database: a pool that is never opened will do.
    return build_app(new_pool("postgresql://unused/none"))


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    doc = _offline_app().openapi()
    return [(method.upper(), path, op) for path, ops in doc["paths"].items() for method, op in ops.items()]


OPERATIONS = _operations()


def _routes(app: Any) -> list[tuple[str, str]]:
    """(method, path) of every route of ``app``, those of its included routers too (FastAPI
    0.165 keeps an included router as one entry of ``app.routes``; older ones list its routes)."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # an older FastAPI: app.routes is flat
        routes: list[Any] = list(app.routes)
    else:
        routes = list(iter_route_contexts(app.routes))
    return [(method, re.sub(r"\{(\w+):\w+\}", r"{\1}", r.path))  # {guid:path} is {guid} in the document
            for r in routes if isinstance(getattr(r, "route", r), APIRoute) for method in set(r.methods or ()) - {"HEAD"}]


def test_every_route_is_public_or_in_the_openapi_document_with_a_rule() -> None:
    app = _offline_app()
    documented = {(m, p) for m, p, _ in OPERATIONS}
    routes = _routes(app)
    assert documented <= set(routes), "the walk reaches every documented operation (the included routers')"
    for method, path in routes:
        if path in PUBLIC or path == "/console" or path.startswith("/console/"):  # the console: shells, parts guarded as the API
            continue
        assert (method, path) in documented, f"{method} {path} is not in the OpenAPI document"
    for method, path, op in OPERATIONS:
        action = op.get("x-pacer-action")
        assert action in RULES, f"{method} {path} names no action of the permission table (x-pacer-action)"
        assert op["x-pacer-role"] == RULES[action].role.value
    assert {op["x-pacer-action"] for _, _, op in OPERATIONS} == set(RULES) - FIELD_ACTIONS, "a rule no route uses"


@dataclass
class Matrix:
    """The app on one database and one event loop (in a thread) for the whole matrix."""

    portal: BlockingPortal
    client: httpx.AsyncClient
    tokens: dict[str, str]

    def request(self, method: str, target: str, headers: dict[str, str]) -> httpx.Response:
        return self.portal.call(functools.partial(self.client.request, method, target, headers=headers))


@pytest.fixture(scope="module")
def matrix(infra_env: Infra) -> Iterator[Matrix]:
    base = infra_env.database_url
    name = f"t_authz_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(with_db(base, "postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    url = with_db(base, name)
    try:
        with start_blocking_portal() as portal:
            pool = portal.call(functools.partial(open_pool, url, min_size=1, max_size=2, name="test-authz"))
            # The dead letters are read from the real broker, under a prefix with no topics.
            dead_letters = KafkaDeadLetters(KafkaSettings(kafka_bootstrap_servers=infra_env.kafka_bootstrap,
                                                          topic_prefix=f"t{uuid.uuid4().hex[:12]}"))
            app = build_app(pool, dead_letters=dead_letters)
            client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://control")
            try:
                yield Matrix(portal, client, portal.call(make_tokens, url))
            finally:
                portal.call(client.aclose)
                portal.call(pool.close)
    finally:
        with psycopg.connect(with_db(base, "postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.parametrize("role", [None, *(r.value for r in Role)], ids=lambda r: r or "no-token")
@pytest.mark.parametrize("method,path,op", OPERATIONS, ids=[f"{m} {p}" for m, p, _ in OPERATIONS])
def test_authorization(matrix: Matrix, method: str, path: str, op: dict[str, Any], role: str | None) -> None:
    rule = RULES[op["x-pacer-action"]]
    target = re.sub(r"{(\w+)}", lambda m: PARAMS[m.group(1)], path)
    r = matrix.request(method, target, {"Authorization": f"Bearer {matrix.tokens[role]}"} if role else {})
    if role is None:
        assert r.status_code == 401, r.text
        assert r.json() == {"detail": "missing bearer token: send 'Authorization: Bearer <token>'"}
    elif RANK[Role(role)] < RANK[rule.role]:
        assert r.status_code == 403, r.text
        assert r.json() == {"detail": f"role '{role}' may not {rule.what}; needs '{rule.role.value}'"}
    else:
        assert r.status_code not in (401, 403), r.text
        assert r.status_code < 500, r.text
