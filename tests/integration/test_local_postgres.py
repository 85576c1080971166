"""The local Postgres the tooling starts stops cleanly even when a parent of its data
directory lost the traverse bit the start gave it (a new pytest session makes its
/tmp/pytest-of-<user> 0700 again while another session's servers run)."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from pacer_dev import infra
from pacer_dev.infra import postgres


@pytest.mark.skipif(os.geteuid() != 0, reason=(
    "only a root run starts Postgres as an account of its own; run as any other user, Postgres is that user, "
    "who owns the closed directory, so there is nothing to lose"))
def test_a_local_postgres_stops_after_a_parent_of_its_data_lost_the_traverse_bit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PACER_DATABASE_URL", raising=False)
    state = tmp_path / "servers"
    url = infra.up_postgres(state)
    try:
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        tmp_path.chmod(0o700)  # root's, and closed to the Postgres account again
        pid = postgres.postmaster_pid(state)
        infra.down(state)
        assert pid is not None and not infra.process.pid_alive(pid)
    finally:
        infra.destroy(state)
