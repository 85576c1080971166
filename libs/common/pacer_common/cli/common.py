"""What every ``pacer`` command shares: exit codes, a call to the Control API, and the
refusal of a command that needs the services stopped."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

import httpx
from pydantic import ValidationError

from pacer_common.settings import ControlClientSettings

# Exit codes of the operator actions: done; the target does not exist; bad arguments or
# settings; refused (the message says why: in flight, already queued, delivered or final);
# the token is missing, unknown or its role may not do this; the Control API is unreachable.
EXIT_DONE, EXIT_NOT_FOUND, EXIT_USAGE, EXIT_REFUSED, EXIT_DENIED, EXIT_UNAVAILABLE = 0, 1, 2, 3, 4, 5
HTTP_EXIT = {404: EXIT_NOT_FOUND, 422: EXIT_USAGE, 409: EXIT_REFUSED, 401: EXIT_DENIED, 403: EXIT_DENIED,
             503: EXIT_UNAVAILABLE}


def one_line(exc: ValidationError) -> str:
    """Settings that are missing or not valid, in one line: ``Model: field: why; …``."""
    return f"{exc.title}: " + "; ".join(f"{'.'.join(map(str, e['loc'])) or '(settings)'}: {e['msg']}"
                                        for e in exc.errors())


def count(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a count of at least 1, not {text!r}")
    return int(text)


WRITERS = "the planner, the senders, the reconcilers and the Control API"  # every service that writes items


def unless_stopped(args: argparse.Namespace, services: str, why: str) -> int:
    """For a command that works on the database or Kafka itself: refused (``EXIT_REFUSED``,
    saying what to stop and why) unless ``--services-stopped`` says they are stopped; else 0."""
    if args.services_stopped:
        return 0
    print(f"refused: stop {services} first ({why}), then pass --services-stopped", file=sys.stderr)
    return EXIT_REFUSED


def control_call(method: str, path: str, exits: Mapping[int, int] | None = None, **kw: Any) -> int:
    """One call to the Control API as ``PACER_TOKEN``: the same role check, use case and audit
    record as every other client. Prints the answer; the exit code says how it went
    (``exits``: a command's own codes for some HTTP statuses, over :data:`HTTP_EXIT`)."""
    try:
        cfg = ControlClientSettings()
    except ValidationError:
        print("set PACER_CONTROL_URL (the Control API, e.g. http://127.0.0.1:9104/api/v1) and PACER_TOKEN "
              "(an API token): `eval \"$(make -s env)\"` after `make up`", file=sys.stderr)
        return EXIT_USAGE
    headers = {"Authorization": f"Bearer {cfg.token.get_secret_value()}"}
    try:
        r = httpx.request(method, cfg.control_url.rstrip("/") + path, headers=headers,
                          timeout=cfg.control_timeout_s, **kw)
    except httpx.HTTPError as exc:
        print(f"the Control API at {cfg.control_url} cannot be reached: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    try:
        body = r.json()
    except ValueError:
        body = {"detail": r.text}
    if r.status_code == 200:
        if "message" in body and "outcome" in body:
            print(f"{body.get('result', body['outcome'])}: {body['message']}")
        else:
            print(json.dumps(body, default=str))
        return EXIT_DONE
    detail = body.get("detail", r.text)
    word = body.get("result", body.get("outcome", str(r.status_code)))
    print(f"{word}: {detail}", file=sys.stderr)
    return {**HTTP_EXIT, **(exits or {})}.get(r.status_code, EXIT_UNAVAILABLE if r.status_code >= 500 else EXIT_REFUSED)
