"""`pacer-infra`: start, inspect and stop the local Kafka and Postgres.

`up` and `env` print shell-sourceable `export NAME=value` lines on stdout (progress goes to
stderr), so `eval "$(pacer-infra up)"` or a Makefile can consume them directly.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from pacer_dev import infra


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pacer-infra` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="pacer-infra: %(message)s",
        stream=sys.stderr,
    )
    state_dir: Path | None = args.state_dir
    try:
        return int(args.handler(state_dir))
    except infra.InfraError as exc:
        print(f"pacer-infra: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _up(state_dir: Path | None) -> int:
    _print_env(infra.up(state_dir))
    return 0


def _down(state_dir: Path | None) -> int:
    infra.down(state_dir)
    return 0


def _env(state_dir: Path | None) -> int:
    running = infra.current(state_dir)
    if running is None:
        print("pacer-infra: not up; run `pacer-infra up`", file=sys.stderr)
        return 1
    _print_env(running)
    return 0


def _status(state_dir: Path | None) -> int:
    """Print one line per server; exit 0 only if every server is usable."""
    components = infra.status(state_dir)
    for item in components:
        pid = f" pid={item.pid}" if item.pid is not None else ""
        print(f"{item.name:<9} {item.state:<9} {item.address or '-'}{pid}")
    return 0 if all(item.state in ("running", "external") for item in components) else 1


def _destroy(state_dir: Path | None) -> int:
    infra.destroy(state_dir)
    return 0


def _print_env(running: infra.Infra) -> None:
    for name, value in running.env().items():
        print(f"export {name}={shlex.quote(value)}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pacer-infra",
        description="Run a local Kafka (KRaft) and PostgreSQL for Pacer, without Docker.",
        epilog="State lives in --state-dir, else $PACER_STATE_DIR, else ./.pacer. "
        "Set PACER_KAFKA_BOOTSTRAP_SERVERS or PACER_DATABASE_URL to use existing servers instead.",
    )
    parser.add_argument("--state-dir", type=Path, default=None, help="directory for data, logs and infra.json")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, handler, help_text in (
        ("up", _up, "start (or reuse) Kafka and Postgres and print their env lines"),
        ("down", _down, "stop the servers started here, keeping their data"),
        ("env", _env, "print the env lines of a running setup; exit 1 if it is not up"),
        ("status", _status, "show what runs where; exit 1 if anything is not up"),
        ("destroy", _destroy, "stop the servers and delete the state dir"),
    ):
        commands.add_parser(name, help=help_text).set_defaults(handler=handler)
    return parser


if __name__ == "__main__":
    sys.exit(main())
