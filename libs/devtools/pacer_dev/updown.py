"""``make up`` / ``make down``: the whole stack in the background, for trying Pacer by hand.

``make up`` starts (or reuses) Kafka and Postgres, migrates, creates topics, starts the
fake gateway — unless ``PACER_GATEWAY_URL`` names a gateway to use — the three services,
the Control API and the callback intake, makes an admin API token (kept in the state directory, so ``make env``
prints it again), then prints where everything is. ``make down`` stops all of it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from pacer_dev import infra, prometheus
from pacer_dev.stack import LOCAL_CALLBACK_SECRET, Stack, prepare

# `make up` lets POST /test-send reach this to_id (on the fake gateway, unless a real one is named).
SANDBOX_TARGET = "sandbox-room"


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
        stack.start_service("control", PACER_CONTROL_SANDBOX_TARGETS=SANDBOX_TARGET)
        stack.start_intake()
        if prometheus.binary("prometheus"):
            stack.start_prometheus(interval_s=5.0)
        else:
            print("# prometheus: not installed (apt-get install prometheus), not started")
    _admin_token(state, inf.database_url)
    _print(inf, stack, state)
    return 0


def env(args: argparse.Namespace) -> int:
    state = _state(args)
    inf = infra.current(state)
    if inf is None:
        print("pacer: not up; run `make up`", file=sys.stderr)
        return 1
    _print(inf, Stack.load(state, inf), state)
    return 0


def _admin_token(state: Path, database_url: str) -> str:
    """The local admin token of the Control API: the one kept in ``<state>/control-token`` if
    the database still knows it, else a new one (made like ``pacer token create``)."""
    import asyncio
    import secrets

    import psycopg

    from pacer_common.db.operations import create_token
    from pacer_common.domain.tokens import Role, token_hash

    path = state / "control-token"
    if path.exists():
        token = path.read_text().strip()
        with psycopg.connect(database_url) as conn:
            if conn.execute("SELECT 1 FROM api_tokens WHERE token_hash = %s AND revoked_at IS NULL",
                            (token_hash(token),)).fetchone():
                return token

    async def make() -> str:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            made = await create_token(conn, f"make-up-admin-{secrets.token_hex(3)}", Role.ADMIN, "make-up")
        return made.token

    token = asyncio.run(make())
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token


def _print(inf: infra.Infra, stack: Stack, state: Path) -> None:
    print(f"export PACER_KAFKA_BOOTSTRAP_SERVERS={inf.kafka_bootstrap}")
    print(f"export PACER_DATABASE_URL={inf.database_url}")
    print(f"export PACER_GATEWAY_URL={stack.gateway_url}")
    print(f"export PACER_TOPIC_PREFIX={stack.topic_prefix}")
    prom = stack.procs.get("prometheus")
    if prom is not None:
        print(f"export PACER_PROMETHEUS_URL={prom.url}")
    control = stack.procs.get("control")
    token = state / "control-token"
    if control is not None:
        print(f"export PACER_CONTROL_URL={control.url}/api/v1")
        if token.exists():
            print(f"export PACER_TOKEN={token.read_text().strip()}")
        # The console asks for the token on its sign-in page; it never goes into a URL.
        print(f"export PACER_CONSOLE_URL={control.url}/console")
        print(f"# control API docs: {control.url}/api/v1/docs (sandbox to_id for test sends: {SANDBOX_TARGET})")
    intake = stack.procs.get("intake")
    if intake is not None:
        print(f"export PACER_INTAKE_URL={intake.url}")
        print(f"export PACER_INTAKE_DEFAULT_CALLBACK_SECRET={LOCAL_CALLBACK_SECRET}")
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
