"""``python -m pacer_dev.chaos [--short] [scenario …]``: run the fault scenarios, one line each.

``CHAOS_KILLS=N`` sets how many senders the kill scenario kills (default 20); ``CHAOS_SEED`` fixes the seed;
``CHAOS_KEEP_DATABASES=1`` keeps each scenario's database (printed) instead of dropping it.

Exits non-zero if any scenario shows a duplicate delivery, a lost item, an unverified send,
did not finish, or shows no sign of its fault (``pacer_dev.chaos.evidence``).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
from dataclasses import replace
from pathlib import Path

from pacer_dev import infra
from pacer_dev.chaos.evidence import verdict
from pacer_dev.chaos.harness import line
from pacer_dev.chaos.scenarios import SCENARIOS, Size


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    p = argparse.ArgumentParser(prog="pacer-chaos", description=__doc__)
    p.add_argument("scenarios", nargs="*", choices=[*SCENARIOS, []], metavar="SCENARIO")
    p.add_argument("--short", action="store_true", help="fewer items and kills (the form make test runs)")
    p.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "0")) or None)
    args = p.parse_args()
    size = Size(items=1000, guids=20, kills=5, timeout_s=300) if args.short else Size()
    if kills := os.environ.get("CHAOS_KILLS"):
        size = replace(size, kills=int(kills), timeout_s=max(size.timeout_s, int(kills) * 12.0))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    state = Path(os.environ.get("PACER_STATE_DIR", ".pacer")) / "chaos"
    infra.prune_kafka(state)  # the topics of a run that did not finish: never let them pile up
    started_here = infra.current(state) is None  # left running after the run only if it was before
    inf = infra.up(state)
    print(f"chaos: seed={seed} items={size.items} guids={size.guids} kafka={inf.kafka_bootstrap}", file=sys.stderr)
    ok = True
    try:
        for name in args.scenarios or list(SCENARIOS):
            fig, extra = SCENARIOS[name](inf, state / "runs", size, random.Random(seed))
            print(line(name, fig, extra), flush=True)
            if wrong := verdict(name, fig, size):
                print(f"chaos {name}: FAILED: {'; '.join(wrong)}", flush=True)
                ok = False
    finally:
        if started_here:
            infra.down(state)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
