"""The short form of ``make chaos``: every fault scenario, on real processes, fewer items.

Each scenario must end with every item final, no key delivered twice, and Pacer's record
agreeing with the gateway's (see ``pacer_dev.chaos.harness.Scenario.measure``).

The scenarios that restart Kafka or Postgres restart servers of this module's own: the
session's are shared with the tests other workers run alongside.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pacer_dev import infra
from pacer_dev.chaos.evidence import verdict
from pacer_dev.chaos.scenarios import RESTARTS_SERVERS, SCENARIOS, Size
from pacer_dev.infra import Infra, postgres

pytestmark = pytest.mark.chaos
SHORT = Size(items=600, guids=12, kills=5, timeout_s=240)


@pytest.fixture(scope="module")
def own_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Infra]:
    state = tmp_path_factory.mktemp("servers")
    try:
        yield infra.up(state)
    finally:
        server_log = postgres.home_dir(state) / "postgres.log"
        if server_log.exists():  # kept beside the deleted servers, for a scenario that failed
            shutil.copyfile(server_log, state.parent / f"{state.name}-postgres.log")
        infra.destroy(state)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_no_duplicate_and_no_loss(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    servers = request.getfixturevalue("own_servers" if name in RESTARTS_SERVERS else "infra_env")
    fig, _ = SCENARIOS[name](servers, tmp_path, SHORT, random.Random(name))
    assert not verdict(name, fig, SHORT), f"{name}: {verdict(name, fig, SHORT)}: {fig}"
