"""Fake WeCom gateway: a recording, fault-injecting test double for Pacer's senders.

``state`` holds the pure logic, ``app.create_app`` the HTTP app, ``main`` the
``pacer-fake-gateway`` command and ``process`` helpers to run it as a subprocess.
"""

from __future__ import annotations

from pacer_dev.fakegateway.config import ConfigError, GatewayConfig
from pacer_dev.fakegateway.state import GatewayState

__all__ = ["ConfigError", "GatewayConfig", "GatewayState"]
