"""A service stopped by SIGTERM keeps its ops port through the drain: /readyz answers 503
"stopping" (the load balancer and the orchestrator see it leave) and /metrics shows what the
drain counts, until the service's own shutdown closes it. The Control API, whose main server
is that same uvicorn, still stops on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from pacer_dev.fakegateway.process import free_port
from tests.integration.helpers import wait_for

# A service as planner, sender and reconciler run: main_for → run_service → a body that, once
# stopped, drains one step per line the test writes to its stdin, counting each, until "done".
DRAINING_SERVICE = """
import asyncio, sys
from prometheus_client import Counter
from pacer_common.service import main_for, run_service
from pacer_common.settings import OpsSettings

async def body(ctx):
    ctx.health.set_ready(True, "consuming")
    await ctx.stop.wait()
    ctx.health.set_ready(True, "consuming")  # a round in hand reports its state after the stop
    drained = Counter("pacer_probe_drained_total", "Drain steps", registry=ctx.registry)
    while (await asyncio.to_thread(sys.stdin.readline)).strip() == "step":
        drained.inc()

main_for("probe", OpsSettings(), run_service("probe", "127.0.0.1", int(sys.argv[1]), body))
"""


def _get(url: str) -> tuple[int, str] | None:
    """Status and body, or None while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return None


def _drained(base: str) -> float:
    """The probe's drain steps as /metrics shows them; -1 while it does not answer."""
    got = _get(f"{base}/metrics")
    if got is None:
        return -1.0
    found = re.search(r"^pacer_probe_drained_total (\S+)$", got[1], re.MULTILINE)
    return float(found[1]) if found else 0.0


@pytest.fixture
def stopped_at_the_end() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_draining_service_answers_readyz_503_stopping_and_is_scraped_until_it_exits(
        stopped_at_the_end: list[subprocess.Popen[bytes]]) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", DRAINING_SERVICE, str(port)], stdin=subprocess.PIPE)
    stopped_at_the_end.append(proc)
    assert proc.stdin is not None
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: (got := _get(f"{base}/readyz")) and got[0] == 200, 30, "the service ready")

    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    stopping = wait_for(lambda: (got := _get(f"{base}/readyz")) and got[0] == 503 and got,
                        10, "/readyz to answer 503 while the service drains")
    assert json.loads(stopping[1]) == {"ready": False, "reason": "stopping"}
    # uvicorn's own signal handling stopped the port within its 0.1 s tick: each drain step is
    # scraped, step by step, for a second past the signal.
    steps = 0
    while steps < 5 or time.monotonic() - signalled < 1.0:
        assert proc.poll() is None, "still draining"
        proc.stdin.write(b"step\n")
        proc.stdin.flush()
        steps += 1
        wait_for(lambda n=steps: _drained(base) == n, 10, f"drain step {steps} scraped")
    assert json.loads((_get(f"{base}/readyz") or (0, "null"))[1]) == {"ready": False, "reason": "stopping"}
    alive = _get(f"{base}/healthz")
    assert alive is not None and alive[0] == 200 and json.loads(alive[1])["status"] == "ok", alive

    proc.stdin.write(b"done\n")
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert _get(f"{base}/readyz") is None, "the ops port closes with the service"


def test_the_control_api_still_stops_on_sigterm(database_url: str,
                                                stopped_at_the_end: list[subprocess.Popen[bytes]]) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PACER_KAFKA_")}
    env |= {"PACER_DATABASE_URL": database_url, "PACER_CONTROL_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-m", "pacer_control"], env=env, stdin=subprocess.DEVNULL)
    stopped_at_the_end.append(proc)
    wait_for(lambda: (got := _get(f"http://127.0.0.1:{port}/readyz")) and got[0] == 200, 30, "control ready")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
