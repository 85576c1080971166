"""What every ``pacer`` command shares: exit codes and the refusal of a command that needs
the services stopped."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

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


def unless_stopped(args: argparse.Namespace, services: str, why: str) -> int:
    """For a command that works on the database or Kafka itself: refused (``EXIT_REFUSED``,
    saying what to stop and why) unless ``--services-stopped`` says they are stopped; else 0."""
    if args.services_stopped:
        return 0
    print(f"refused: stop {services} first ({why}), then pass --services-stopped", file=sys.stderr)
    return EXIT_REFUSED
