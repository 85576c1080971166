"""Ports for the servers the project starts: free, distinct, and outside the range client
connections take their local ports from (where one picked there is lost to a client before
the server binds it)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pacer_dev.infra import process
from pacer_dev.infra.process import free_ports, listen_range, port_available


@pytest.fixture(autouse=True)
def _one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pick from the whole range, as a process outside pytest-xdist does."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)


def test_each_xdist_worker_picks_from_a_share_of_the_range_no_other_worker_picks_from(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "listen_range", lambda: range(20000, 20600))
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    picked = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        picked[worker] = set(free_ports(100))
        assert picked[worker] <= set(process.worker_share(range(20000, 20600)))
    assert len(picked["gw0"]) == len(picked["gw1"]) == 100
    assert not picked["gw0"] & picked["gw1"], "two workers handed out the same port"
    assert {p % 2 for p in picked["gw0"]} == {0} and {p % 2 for p in picked["gw1"]} == {1}


def _ephemeral(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    monkeypatch.setattr(process, "EPHEMERAL_RANGE", path)


def test_ports_are_picked_below_the_ephemeral_range_distinct_and_bindable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _ephemeral(tmp_path, monkeypatch, "40000\t60999\n")
    assert listen_range() == range(40000 - 16384, 40000)
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(40000 - 16384 <= p < 40000 for p in ports)
    assert all(port_available(p) for p in ports)


def test_a_port_handed_out_is_not_handed_out_again_by_the_same_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _ephemeral(tmp_path, monkeypatch, "5124 60999")  # room for 4,100 ports only: 1024–5123
    seen = free_ports(300)
    seen += free_ports(300)
    assert len(set(seen)) == 600


def _held_port_with_a_free_neighbour() -> socket.socket:
    for _ in range(100):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        if port_available(sock.getsockname()[1] + 1):
            return sock
        sock.close()
    raise AssertionError("no listening port with a free port next to it in 100 tries")


def test_a_port_in_use_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with _held_port_with_a_free_neighbour() as busy:
        port = busy.getsockname()[1]
        monkeypatch.setattr(process, "listen_range", lambda: range(port, port + 2))
        assert free_ports(1) == [port + 1]
        with pytest.raises(process.InfraError, match="no 1 free loopback ports"):
            free_ports(1)  # the one in use, and the one handed out already


def test_where_the_ephemeral_range_leaves_no_room_below_the_kernel_picks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _ephemeral(tmp_path, monkeypatch, "1024 65535")
    assert not listen_range()
    (port,) = free_ports(1)
    assert port_available(port)
