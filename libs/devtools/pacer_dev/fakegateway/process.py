"""Run the fake gateway as a subprocess for tests, benchmarks and demos.

A real process (not an in-process app) so that transports, connection drops and
timeouts behave exactly as they do against a remote gateway.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

from pacer_dev.fakegateway.config import coerce_knob
from pacer_dev.infra.process import free_ports


def free_port() -> int:
    """A loopback TCP port free right now, outside the range client connections draw from."""
    return free_ports(1)[0]


def knob_args(knobs: Mapping[str, Any]) -> list[str]:
    args: list[str] = []
    for name, value in knobs.items():
        coerce_knob(name, value)  # fail fast in the caller, not in the child
        if isinstance(value, Mapping):
            text = json.dumps(dict(value))
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        args += [f"--{name.replace('_', '-')}", text]
    return args


def start_fake_gateway(
    port: int | None = None,
    *,
    host: str = "127.0.0.1",
    startup_timeout: float = 20.0,
    log_level: str = "warning",
    **knobs: Any,
) -> tuple[str, subprocess.Popen[bytes]]:
    """Start ``pacer-fake-gateway`` and wait until ``/healthz`` answers.

    Returns the base URL and the process; pass the process to ``stop``. Raises
    RuntimeError if the server exits or is not healthy within ``startup_timeout``.
    """
    port = free_port() if port is None else port
    cmd = [
        sys.executable,
        "-m",
        "pacer_dev.fakegateway.main",
        "--host",
        host,
        "--port",
        str(port),
        "--log-level",
        log_level,
        *knob_args(knobs),
    ]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    url = f"http://{host}:{port}"
    try:
        wait_healthy(url, proc, startup_timeout)
    except BaseException:
        stop(proc)
        raise
    return url, proc


def wait_healthy(url: str, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """Poll ``GET /healthz`` until it answers 200, the process dies, or time runs out."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"fake gateway exited with code {proc.returncode} (see its stderr)")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1.0) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last_error = exc
        time.sleep(0.05)
    raise RuntimeError(f"fake gateway at {url} not healthy after {timeout:g}s: {last_error}")


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int | None:
    """Terminate the server (SIGTERM, then SIGKILL after ``timeout``); return its exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


@contextlib.contextmanager
def running_fake_gateway(port: int | None = None, **knobs: Any) -> Iterator[str]:
    """Context manager form of ``start_fake_gateway``; yields the base URL."""
    url, proc = start_fake_gateway(port, **knobs)
    try:
        yield url
    finally:
        stop(proc)
