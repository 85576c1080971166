"""The short form of ``make chaos``: every fault scenario, on real processes, fewer items.

Each scenario must end with every item final, no key delivered twice, and Pacer's record
agreeing with the gateway's (see ``pacer_dev.chaos.harness.Scenario.measure``).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pacer_dev.chaos.evidence import verdict
from pacer_dev.chaos.scenarios import SCENARIOS, Size
from pacer_dev.infra import Infra

pytestmark = pytest.mark.chaos
SHORT = Size(items=600, guids=12, kills=5, timeout_s=240)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_no_duplicate_and_no_loss(name: str, infra_env: Infra, tmp_path: Path) -> None:
    fig, _ = SCENARIOS[name](infra_env, tmp_path, SHORT, random.Random(name))
    assert not verdict(name, fig, SHORT), f"{name}: {verdict(name, fig, SHORT)}: {fig}"
