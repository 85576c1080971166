"""``make up`` / ``make down``: the whole stack in the background, for trying Pacer by hand.

``make up`` starts (or reuses) Kafka and Postgres, migrates, creates topics, starts the
fake gateway — unless ``PACER_GATEWAY_URL`` names a gateway to use — and the three
services, then prints where everything is. ``make down`` stops all of it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from pacer_dev import infra
from pacer_dev.stack import Stack, prepare


def _state(args: argparse.Namespace) -> Path:
    return Path(args.state_dir or os.environ.get("PACER_STATE_DIR", ".pacer"))


def up(args: argparse.Namespace) -> int:
    state = _state(args)
    inf = infra.up(state)
    stack = Stack.load(state, inf)
    if any(p.alive() for p in stack.procs.values()):
        print("# pacer: already up (make down first to restart)")
    else:
        stack.procs.clear()
        prepare(inf.database_url, {"bootstrap.servers": inf.kafka_bootstrap}, stack.topic_prefix)
        external = os.environ.get("PACER_GATEWAY_URL")
        if external:
            stack.gateway_url = external
        else:
            stack.start_gateway()
        for kind in ("planner", "sender", "reconciler"):
            stack.start_service(kind)
    _print(inf, stack)
    return 0


def env(args: argparse.Namespace) -> int:
    state = _state(args)
    inf = infra.current(state)
    if inf is None:
        print("pacer: not up; run `make up`", file=sys.stderr)
        return 1
    _print(inf, Stack.load(state, inf))
    return 0


def _print(inf: infra.Infra, stack: Stack) -> None:
    print(f"export PACER_KAFKA_BOOTSTRAP_SERVERS={inf.kafka_bootstrap}")
    print(f"export PACER_DATABASE_URL={inf.database_url}")
    print(f"export PACER_GATEWAY_URL={stack.gateway_url}")
    print(f"export PACER_TOPIC_PREFIX={stack.topic_prefix}")
    for p in stack.procs.values():
        print(f"# {p.name}: pid {p.pid}, {p.url}, log {p.log}")


def down(args: argparse.Namespace) -> int:
    state = _state(args)
    current = infra.current(state)
    if current is not None:
        Stack.load(state, current).stop_all()
    infra.down(state)
    print("pacer: down")
    return 0


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    p = argparse.ArgumentParser(prog="pacer-stack", description=__doc__)
    p.add_argument("--state-dir")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("up").set_defaults(fn=up)
    sub.add_parser("down").set_defaults(fn=down)
    sub.add_parser("env").set_defaults(fn=env)
    args = p.parse_args()
    raise SystemExit(args.fn(args))


if __name__ == "__main__":
    main()
