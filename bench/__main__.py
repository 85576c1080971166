"""``make bench``: every benchmark on real Kafka, Postgres and the fake gateway, one line each.

``python -m bench [scenario …]``; sizes via BENCH_* variables (see docs/performance.md).
"""

from __future__ import annotations

import logging
import sys

from bench.common import PostgresLog, state_dir
from bench.scenarios import SCENARIOS
from pacer_dev import infra


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    names = sys.argv[1:] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; choose from {list(SCENARIOS)}")
    infra.prune_kafka(state_dir())  # the topics of a run that did not finish: never let them pile up
    # Kafka and Postgres are left running only if they were before (``pacer-infra --state-dir
    # .pacer/bench up`` for repeated runs): idle servers left behind would skew the next
    # measurement made on this machine.
    started_here = infra.current(state_dir()) is None
    postgres_log = PostgresLog(state_dir() / "postgres" / "postgres.log")
    try:
        for name in names:
            print(SCENARIOS[name](), flush=True)
            postgres_log.note(name)
        print(postgres_log.summary(), flush=True)
    finally:
        if started_here:
            infra.down(state_dir())


if __name__ == "__main__":
    main()
