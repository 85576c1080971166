"""``make bench``: every benchmark on real Kafka, Postgres and the fake gateway, one line each.

``python -m bench [scenario …]``; sizes via BENCH_* variables (see docs/performance.md).
"""

from __future__ import annotations

import logging
import sys

from bench.scenarios import SCENARIOS


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    names = sys.argv[1:] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; choose from {list(SCENARIOS)}")
    for name in names:
        print(SCENARIOS[name](), flush=True)


if __name__ == "__main__":
    main()
