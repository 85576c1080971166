"""Every service runs on the event loop its settings name (``PACER_<SERVICE>_EVENT_LOOP``):
uvloop by default, Python's own asyncio loop on request. In a process of its own, as a
service's ``main()`` runs: ``main_for`` sets up the process's logging."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import asyncio, sys
from pacer_common.service import main_for
from pacer_common.settings import OpsSettings

async def probe() -> None:
    print(type(asyncio.get_running_loop()).__module__)

main_for("probe", OpsSettings(**({"event_loop": sys.argv[1]} if len(sys.argv) > 1 else {})), probe())
"""


@pytest.mark.parametrize(("setting", "module"), [
    (None, "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio.unix_events"),
])
def test_a_service_runs_on_the_event_loop_its_settings_name(setting: str | None, module: str) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, *([setting] if setting else [])],
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == module, out.stderr
