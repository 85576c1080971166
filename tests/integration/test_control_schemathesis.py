"""Property-based requests to every Control API operation, generated from its own OpenAPI
document (schemathesis), as an admin: whatever the input, never a 5xx."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.python import asgi

from pacer_common.db.pool import new_pool
from pacer_common.settings import KafkaSettings
from pacer_control.adapters.kafka import KafkaDeadLetters
from pacer_control.app import build_app
from pacer_dev.infra import Infra
from tests.conftest import TEMPLATE, with_db
from tests.integration.control_support import make_tokens
from tests.integration.helpers import seed_job

pytestmark = pytest.mark.timeout(120)
TOKEN: dict[str, str] = {}


def _app(url: str, kafka: str) -> Any:
    # Schemathesis serves the app on an event loop of its own and runs its lifespan once per
    # test: the lifespan opens this (new, unopened) pool on that loop and closes it afterwards.
    # The dead letters are read from the real broker, under a prefix with no topics.
    dead_letters = KafkaDeadLetters(KafkaSettings(kafka_bootstrap_servers=kafka, topic_prefix=f"t{uuid.uuid4().hex[:12]}"))
    return build_app(new_pool(url, min_size=1, max_size=4, name="test-schemathesis"), dead_letters=dead_letters)


@pytest.fixture(scope="module")
def schema_db(infra_env: Infra) -> Iterator[tuple[str, str, Any]]:
    """One database for every operation's test, with a job to find and an admin token; the
    OpenAPI document is loaded once."""
    base = infra_env.database_url
    name = f"t_schema_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(with_db(base, "postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    url = with_db(base, name)
    seed_job(url, {"g1": 3, "g2": 2})
    TOKEN["admin"] = asyncio.run(make_tokens(url, prefix="schemathesis-"))["admin"]
    try:
        yield url, infra_env.kafka_bootstrap, schemathesis.openapi.from_asgi(
            "/api/v1/openapi.json", _app(url, infra_env.kafka_bootstrap))
    finally:
        asgi.shutdown_lifespans()
        with psycopg.connect(with_db(base, "postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def control_schema(schema_db: tuple[str, str, Any]) -> Any:
    url, kafka, schema = schema_db
    schema.app = _app(url, kafka)  # a fresh app (and pool) for this test's lifespan
    return schema


def _operations() -> list[tuple[str, str]]:
    # Listed at collection time from the offline document: no database needed for that.
    doc = build_app(new_pool("postgresql://unused/none")).openapi()
    return [(method.upper(), path) for path, ops in doc["paths"].items() for method in ops]


# Schemathesis's own pytest integration (from_fixture + parametrize) does not run under
# pytest 9.2, so each operation is a plain parametrized test driving its Hypothesis strategy.
# Valid inputs only: inputs that break the schema are answered by FastAPI's validation (422),
# and generating them costs more time than this suite may take (see test_control_api.py for
# the malformed cases that matter).
@pytest.mark.parametrize("method,path", _operations(), ids=lambda v: v)
def test_no_server_errors(control_schema: Any, method: str, path: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN['admin']}"}

    @given(case=control_schema[path][method].as_strategy(generation_mode=GenerationMode.POSITIVE))
    @settings(max_examples=20, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    def run(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=[not_a_server_error])

    run()
