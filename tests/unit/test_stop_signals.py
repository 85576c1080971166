"""Stop signals: the first asks the service to finish what it has in hand; a second, while it
drains, ends it at once (the ops port no longer lets uvicorn hear signals, so this is what
stands for its force exit in every service)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

DRAINS_FOR_EVER = """
import asyncio
from pacer_common.lifecycle import stop_event

async def main() -> None:
    stop = stop_event()
    print("serving", flush=True)
    await stop.wait()
    print("stopping", flush=True)
    await asyncio.Event().wait()  # a drain that never ends

asyncio.run(main())
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_while_draining_ends_the_process_at_once(sig: signal.Signals) -> None:
    proc = subprocess.Popen([sys.executable, "-c", DRAINS_FOR_EVER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "serving"
        proc.send_signal(sig)
        assert proc.stdout.readline().strip() == "stopping"
        assert proc.poll() is None, "the first signal only asks it to stop"
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 128 + sig.value
    finally:
        proc.kill()
        proc.wait()
