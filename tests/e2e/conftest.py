"""The three services as separate processes, against the session's Kafka and Postgres."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pacer_dev.infra import Infra
from pacer_dev.stack import Stack
from tests.conftest import stack_on


@pytest.fixture(scope="module")
def stack(infra_env: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_on(infra_env, tmp_path_factory.mktemp("stack"), f"e{uuid.uuid4().hex[:10]}", {
        "PACER_SENDER_MIN_INTERVAL_MS": "10",
        "PACER_SENDER_JITTER_MS": "5",
        "PACER_RECONCILER_SWEEP_INTERVAL_S": "0.5",
        # The guids by lifecycle state (and the stall count) every 2 s, not 30: the tests wait
        # on those gauges with deadlines of 30 s.
        "PACER_RECONCILER_STALL_COUNT_EVERY_S": "2",
        "PACER_SENDER_MAX_BUFFERED": "100",  # small, so a backlog is read from Postgres
        "PACER_SENDER_SWEEP_S": "2",  # work without a command is found within seconds
    }) as st:
        st.start_gateway(wait=False, min_interval_ms=8)
        st.start_services("planner", "reconciler", ("sender", "sender-1"), ("sender", "sender-2"))
        yield st


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """On a failure, name the stack's services that exited, with the end of their logs: a
    crashed service stalls jobs, and the test then only sees a timeout."""
    outcome = yield
    report = outcome.get_result()
    st = getattr(item, "funcargs", {}).get("stack")
    if report.failed and isinstance(st, Stack):
        dead = [f"{p.name} (pid {p.pid}) exited; log ends:\n" + "\n".join(_tail(p.log, 15))
                for p in st.procs.values() if not p.alive()]
        report.sections.append(("stack services", "\n\n".join(dead) or "every service of the stack is alive"))


def _tail(path: str, n: int) -> list[str]:
    return Path(path).read_text(errors="replace").splitlines()[-n:]


def gateway(stack: Stack, path: str, method: str = "GET", body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{stack.gateway_url}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())
