"""Operating-system helpers shared by the Kafka and Postgres launchers.

Everything here is about processes we spawned earlier (possibly from another Python
process), loopback ports and deadlines, so it sticks to the standard library and `/proc`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pacer_dev.infra.state import InfraError

LOOPBACK = "127.0.0.1"
POLL_INTERVAL_S = 0.2


def pid_alive(pid: int) -> bool:
    """True if `pid` is a live (non-zombie) process.

    A child we spawned and signalled stays a zombie until reaped, and `kill(pid, 0)` still
    succeeds on zombies, so reap it first when it is ours and check `/proc` otherwise.
    """
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass  # not our child: it was started by an earlier `up` from another process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user (the postgres system user)
    return _proc_state(pid) != "Z"


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is parenthesised and may itself contain spaces or parentheses.
    return stat.rsplit(")", 1)[1].split()[0]


def cmdline_matches(pid: int, *needles: str) -> bool:
    """True if the live process `pid` was started with every one of `needles` in argv.

    Guards against pid reuse: a recorded pid may belong to an unrelated process after a
    reboot. Without `/proc` (macOS) liveness alone is trusted.
    """
    if not pid_alive(pid):
        return False
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except OSError:
        return False
    argv = raw.decode(errors="replace").replace("\0", " ")
    return all(needle in argv for needle in needles)


def terminate(pid: int, *, timeout: float, what: str) -> None:
    """Send SIGTERM, wait up to `timeout` seconds, then SIGKILL and wait for the exit."""
    if not pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_for(lambda: not pid_alive(pid), timeout=timeout):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not wait_for(lambda: not pid_alive(pid), timeout=10.0):
        raise InfraError(f"{what} (pid {pid}) survived SIGKILL")


def wait_for(condition: Callable[[], bool], *, timeout: float, interval: float = POLL_INTERVAL_S) -> bool:
    """Poll `condition` every `interval` seconds until it holds or `timeout` seconds pass;
    return whether it held."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()
_random = random.SystemRandom()


def listen_range() -> range:
    """Where servers we start listen: just below the kernel's ephemeral range.

    Outgoing connections (every Kafka, Postgres and HTTP client) take their local ports from
    the ephemeral range; a port picked there and closed again may be a client's before our
    server binds it ("address already in use"), which happens on a busy machine running tests
    several at a time. Empty where that range starts too low to leave room below it."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(max(1024, low - 16384), low) if low - 1024 >= 4096 else range(0)


def worker_share(candidates: range) -> range:
    """Under pytest-xdist, this worker's share of ``candidates`` (every Nth port, from its
    number), so that no two workers hand out the same port: a server one of them picked may take
    seconds to bind it (Kafka's JVM), and meanwhile the port looks free to the other."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        return candidates[int(worker[2:]) % int(count)::int(count)]
    return candidates


def free_ports(count: int) -> list[int]:
    """Distinct loopback ports that are free right now and were not handed out before by this
    process: picked at random in ``listen_range`` (so that two processes picking at the same
    moment rarely meet; under pytest-xdist, in this worker's share of it), or by the kernel
    where that range is empty."""
    candidates = worker_share(listen_range())
    if not candidates:
        return _kernel_ports(count)
    picked: list[int] = []
    for _ in range(50 * count):
        port = _random.choice(candidates)
        if port not in _handed_out and port_available(port):
            _handed_out.add(port)
            picked.append(port)
            if len(picked) == count:
                return picked
    raise InfraError(f"no {count} free loopback ports found in {candidates.start}-{candidates.stop - 1}")


def _kernel_ports(count: int) -> list[int]:
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_available(port: int) -> bool:
    """True if a server could bind `port` on loopback (SO_REUSEADDR, as servers do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def ensure_ports_available(what: str, *ports: int) -> None:
    """Fail clearly when a recorded port was taken by someone else while we were down."""
    taken = [port for port in ports if not port_available(port)]
    if taken:
        raise InfraError(
            f"cannot start {what}: port(s) {taken} on {LOOPBACK} are in use by another process; "
            "free them or run `pacer-infra destroy` to start over on new ports"
        )


def tcp_accepts(port: int, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on loopback `port`."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive inter-process lock on `path`, so concurrent callers serialise.

    The lock dies with the process holding it, so a crashed caller never wedges others.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def tail(path: Path, lines: int = 40) -> str:
    """Last `lines` lines of a log file, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])
