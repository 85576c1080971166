"""Sender owner ids are unique per process start, whatever the hostname and pid."""

from __future__ import annotations

import os
import socket

import pytest

from pacer_sender.settings import SenderSettings


def test_two_starts_with_the_same_hostname_and_pid_get_different_owners() -> None:
    """Two pods on one node share a hostname and both run as pid 1; a restarted container
    keeps both. Their owners must still differ, or each would renew the other's leases."""
    first, second = SenderSettings(), SenderSettings()
    prefix = f"{socket.gethostname()}:{os.getpid()}:"
    assert first.owner.startswith(prefix) and second.owner.startswith(prefix)
    assert first.owner != second.owner
    assert len(first.owner) - len(prefix) == 12


def test_a_configured_owner_name_is_kept_as_a_prefix_and_still_made_unique(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACER_SENDER_OWNER", "sender-0")
    owners = {SenderSettings().owner for _ in range(50)}
    assert len(owners) == 50
    assert all(o.startswith("sender-0:") for o in owners)

