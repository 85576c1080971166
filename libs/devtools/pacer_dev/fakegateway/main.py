"""``pacer-fake-gateway``: run the fake gateway under uvicorn.

Every knob can be given as ``--knob-name VALUE`` or as the environment variable
``PACER_FAKE_GATEWAY_KNOB_NAME``; the flag wins. Mapping knobs (``fail_guids``,
``guid_min_interval_ms``) take JSON objects.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn

from pacer_dev.fakegateway.app import create_app
from pacer_dev.fakegateway.config import KNOB_NAMES, ConfigError, GatewayConfig, config_from_mapping

ENV_PREFIX = "PACER_FAKE_GATEWAY_"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8780


@dataclass(frozen=True)
class ServerSettings:
    """Where and how to serve, plus the initial knobs."""

    host: str
    port: int
    log_level: str
    config: GatewayConfig


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pacer-fake-gateway",
        description="Fake WeCom gateway for Pacer development, demos and tests.",
    )
    parser.add_argument("--host", default=None, help=f"bind address (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=None, help=f"bind port (default {DEFAULT_PORT})")
    parser.add_argument("--log-level", default=None, help="uvicorn log level (default info)")
    knobs = parser.add_argument_group("knobs (also settable at runtime via PUT /_admin/config)")
    for name in KNOB_NAMES:
        knobs.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, metavar="VALUE")
    return parser


def load_settings(argv: Sequence[str] | None, environ: Mapping[str, str]) -> ServerSettings:
    """Merge defaults, ``PACER_FAKE_GATEWAY_*`` variables and flags into settings."""
    args = build_parser().parse_args(argv)
    raw: dict[str, Any] = {}
    for name in KNOB_NAMES:
        env_value = environ.get(ENV_PREFIX + name.upper())
        if env_value is not None:
            raw[name] = env_value
        flag_value = getattr(args, name)
        if flag_value is not None:
            raw[name] = flag_value
    host = args.host or environ.get(ENV_PREFIX + "HOST") or DEFAULT_HOST
    port = args.port if args.port is not None else int(environ.get(ENV_PREFIX + "PORT", DEFAULT_PORT))
    log_level = args.log_level or environ.get(ENV_PREFIX + "LOG_LEVEL") or "info"
    return ServerSettings(host, port, log_level.lower(), config_from_mapping(raw))


def speedups() -> dict[str, Any]:
    """uvicorn ``http``/``loop`` choices: httptools and uvloop when installed."""
    return {
        "http": "httptools" if importlib.util.find_spec("httptools") else "h11",
        "loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Parse flags and environment, build the app and serve until SIGINT/SIGTERM."""
    try:
        settings = load_settings(argv, os.environ)
    except (ConfigError, ValueError) as exc:
        print(f"pacer-fake-gateway: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    uvicorn.run(
        create_app(settings.config),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        timeout_graceful_shutdown=3,
        **speedups(),
    )


if __name__ == "__main__":
    main()
