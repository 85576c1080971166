"""``pacer rewind-groups`` and ``pacer after-restore``: after Postgres is restored from a
backup (docs/runbook.md, "Restoring Postgres from a backup")."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from typing import Any

import psycopg
from confluent_kafka import KafkaException

from pacer_common.cli.common import EXIT_REFUSED, EXIT_UNAVAILABLE, EXIT_USAGE, WRITERS, unless_stopped
from pacer_common.db.sql import query
from pacer_common.kafka import UNREAD_SPECS, GroupHasMembers, group_on_topic, rewind_group, unread
from pacer_common.settings import KafkaSettings, PostgresSettings


def _after_restore(args: argparse.Namespace) -> int:
    """Put in doubt every send a database restored from a backup cannot vouch for, so that the
    reconciler verifies each by lookup before anything sends it again (docs/runbook.md,
    "Restoring Postgres from a backup")."""
    if refused := unless_stopped(args, WRITERS,
                                  "no send may start while the items are put in doubt"):
        return refused
    if args.batch < 1:
        print("--batch must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if args.to is None and not args.requests_lost:
        print("--to is required: the restore point given to `pacer rewind-groups` (or --requests-lost)",
              file=sys.stderr)
        return EXIT_USAGE
    url = PostgresSettings().database_url.get_secret_value()
    if refused := _senders_running(url):
        return refused
    if args.requests_lost:
        print("the groups' rewind and the planners' progress not checked (--requests-lost): items planned from "
              "here on are not put in doubt", file=sys.stderr)
    elif refused := _not_rewound(args.to, url) or _planners_unfinished(args, url):
        return refused
    moved: dict[str, int] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query("restore_epoch")).fetchone()
        epoch = int(row[0]) if row else 0
        started = time.monotonic()
        while True:
            with conn.transaction():
                rows = conn.execute(query("after_restore"), {"actor": "cli", "reason": args.reason,
                                                             "limit": args.batch}).fetchall()
            if not rows:
                break
            for status, n in rows:
                moved[status] = moved.get(status, 0) + n
            print(f"… {sum(moved.values())} items put in doubt so far ({time.monotonic() - started:.0f} s)",
                  file=sys.stderr, flush=True)
        conn.execute(query("after_restore_audit"), {"actor": "cli", "reason": args.reason,
                                                    "after": json.dumps({"in_doubt": moved, "restore_epoch": epoch,
                                                                        "kafka_checked": not args.requests_lost})})
    by_status = ", ".join(f"{n} {s}" for s, n in sorted(moved.items())) or "none"
    print(f"restore epoch {epoch}: outcomes of events written from now on carry pacer-dedupe-key "
          f"item_id:version:{epoch}")
    print(f"put in doubt: {sum(moved.values())} items ({by_status}); the services may start again: the "
          "reconcilers verify each by lookup before it can be sent (pacer_reconciler_open_job_items"
          "{status=\"recovery_pending\"} falls to 0 as they do)")
    return 0


def _senders_running(url: str) -> int:
    """0 when no sender holds a guid lease that has not run out. Else refused (``EXIT_REFUSED``),
    naming the holders: a sender running on the restored database sends again what was sent
    after the restore point before it is put in doubt. ``--services-stopped`` cannot know of a
    sender that KEDA started again after it was scaled to 0; its leases show it."""
    with psycopg.connect(url) as conn:
        held = conn.execute(query("live_guid_leases")).fetchall()
    if not held:
        return 0
    owners = ", ".join(f"{owner} ({n} guids)" for owner, n, _ in held[:5]) + (", …" if len(held) > 5 else "")
    print(f"refused: {len(held)} sender(s) hold guid leases that have not run out: {owners}. Stop the senders; "
          "with sender.keda.enabled pause KEDA at 0 first (annotate scaledobject/<fullname>-sender "
          "autoscaling.keda.sh/paused-replicas=\"0\"), or it starts them again within its polling interval. If they "
          "are stopped, these are leases restored with the backup or left by a sender that was killed: the last "
          f"runs out in {max(left for _, _, left in held)} s (PACER_SENDER_LEASE_TTL_S after its last renewal); "
          "run this again then (docs/runbook.md, \"Restoring Postgres from a backup\")", file=sys.stderr)
    return EXIT_REFUSED


def _not_rewound(to: datetime, url: str) -> int:
    """0 when ``pacer rewind-groups --to`` this restore point is recorded in this database
    (runbook, step 3): a restored database holds no such record unless it was made after the
    restore. Else refused."""
    prefix = KafkaSettings().topic_prefix
    with psycopg.connect(url) as conn:
        row = conn.execute(query("rewind_recorded"), {"prefix": prefix, "to": to}).fetchone()
    if row and row[0]:
        return 0
    print(f"refused: no `pacer rewind-groups --to {to.isoformat()}` is recorded in this database for the topics "
          f"{prefix}.*: run it first, then the planners alone, then this (docs/runbook.md, \"Restoring Postgres "
          "from a backup\")", file=sys.stderr)
    return EXIT_REFUSED


def _planners_unfinished(args: argparse.Namespace, url: str) -> int:
    """0 when the planners have planned again everything the restore lost (runbook, step 4):
    their group has no member and nothing unread on the job requests, and no requery job is
    still paging in its targets. Else refused (``EXIT_REFUSED``, or ``EXIT_UNAVAILABLE``
    without Kafka), saying what is left: items planned after ``after-restore`` would not be
    put in doubt, and those sent before the restore would be sent again."""
    k = KafkaSettings()
    group = args.planner_group or f"{k.topic_prefix}.planner"
    try:
        g = group_on_topic(k.client_config(), group, k.job_requests, UNREAD_SPECS)
    except KafkaException as exc:
        print(f"group {group} on {k.job_requests}: {exc.args[0].str() if exc.args else exc} (--requests-lost "
              "if the requests topic was lost too)", file=sys.stderr)
        return EXIT_UNAVAILABLE
    left = []
    if g.members:
        left.append(f"group {group} has {len(g.members)} member(s): {', '.join(g.members)}: stop the planners")
    if behind := unread(g):
        left.append(f"group {group} has {sum(end - at for at, end in behind.values())} request(s) of "
                    f"{k.job_requests} still to read (" + ", ".join(
                        f"[{p}] {at} of {end}" for p, (at, end) in sorted(behind.items())) + ")")
    with psycopg.connect(url) as conn:
        paging = [r for (r,) in conn.execute(query("requery_paging")).fetchall()]
    if paging:
        left.append(f"{len(paging)} requery job(s) still paging in their targets: {', '.join(paging[:5])}"
                    + (", …" if len(paging) > 5 else ""))
    if not left:
        return 0
    print("refused: the planners have not finished planning again what the restore lost: " + "; ".join(left)
          + ". Run the planners alone until pacer_kafka_consumer_lag on the requests and pacer_planner_paging_jobs "
          "are 0, stop them, then run this again (docs/runbook.md, \"Restoring Postgres from a backup\")",
          file=sys.stderr)
    return EXIT_REFUSED


def _moment(text: str) -> datetime:
    """An ISO 8601 time with its time zone (a restore point is one moment, not a wall clock's)."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time such as 2026-12-04T03:00:00Z") from None
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone: add Z or an offset such as +08:00")
    return at


def _rewind_groups(args: argparse.Namespace) -> int:
    """Move the planners' and the reconcilers' callback consumer groups back to a moment (a
    restore point), so that what they read since is read again."""
    if refused := unless_stopped(args, "the planners and the reconcilers", "their groups must have no members"):
        return refused
    at: datetime = args.to
    k = KafkaSettings()
    planner = args.planner_group or f"{k.topic_prefix}.planner"
    groups = [(planner, k.job_requests), (args.callbacks_group or f"{k.topic_prefix}.reconciler.callbacks", k.callbacks)]
    url = PostgresSettings().database_url.get_secret_value()
    try:
        # Where the planners had handled their requests to, as the restored database holds it
        # (consumer_positions): a request read before the restore point may have been stored
        # after it, and the broker's timestamps would pass over it.
        with psycopg.connect(url) as conn:
            rows = conn.execute(query("recorded_positions"), {"group_id": planner, "topic": k.job_requests}).fetchall()
        recorded: dict[str, dict[int, int]] = {planner: {int(p): int(o) for p, o in rows}}
        if not rows:
            print(f"warning: the database records no position of group {planner} (a backup taken before the "
                  "planners recorded them, or planners of an older version): it goes back by the timestamps alone, "
                  "and a request published before the restore point but stored after it is not read again; to "
                  "read those too, give an earlier --to (requests whose jobs the database has are not planned "
                  "twice)", file=sys.stderr)
    except psycopg.Error as exc:
        print(f"nothing moved: where the planners had got to is read from the restored database, which did not "
              f"answer ({exc}); run this again once it does", file=sys.stderr)
        return EXIT_UNAVAILABLE
    record: dict[str, Any] = {}
    for group, topic in groups:
        try:
            moved = rewind_group(k.client_config(), group, topic, int(at.timestamp() * 1000),
                                 recorded=recorded.get(group))
        except GroupHasMembers as exc:
            print(f"refused: {exc}; stop them first (a member killed, not stopped, leaves once its session "
                  "times out: 10 s for the planners' and reconcilers' groups)", file=sys.stderr)
            return EXIT_REFUSED
        except KafkaException as exc:
            print(f"group {group} on {topic}: {exc.args[0].str() if exc.args else exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        for partition, before, after in moved:
            was = "no offset" if before < 0 else str(before)
            print(f"group {group} {topic}[{partition}]: {was} → {after}" + ("" if after != before else " (kept)"))
        record[group] = {"topic": topic, "offsets": {p: [before, after] for p, before, after in moved}}
    try:
        with psycopg.connect(url) as conn:
            conn.execute(query("rewind_audit"), {"prefix": k.topic_prefix, "to": at.isoformat(),
                                                 "after": json.dumps({"to": at.isoformat(), "groups": record})})
    except psycopg.Error as exc:
        print(f"the groups were moved, but the record `pacer after-restore` looks for was not written ({exc}): "
              "run this again once the database answers (the groups are already there: it moves nothing more)",
              file=sys.stderr)
        return EXIT_UNAVAILABLE
    print(f"recorded in the database: `pacer after-restore --to {at.isoformat()}` may run once the planners "
          "have planned again")
    return 0


def add_restore_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The two commands, on ``pacer``'s subcommand parsers."""
    ar = sub.add_parser("after-restore", help="after Postgres is restored from a backup: put every send it cannot "
                        "vouch for in doubt, to be verified by lookup before anything sends it (services stopped)")
    ar.add_argument("--services-stopped", action="store_true",
                    help=f"confirm that {WRITERS} are stopped")
    ar.add_argument("--reason", required=True, help="why (kept in the audit log and in each item's event)")
    ar.add_argument("--batch", type=int, default=50_000, help="items put in doubt per transaction")
    ar.add_argument("--planner-group", help="default <prefix>.planner (PACER_PLANNER_GROUP_ID, if you set it)")
    ar.add_argument("--to", type=_moment, metavar="TIME",
                    help="the restore point, as given to `pacer rewind-groups` (which must have run)")
    ar.add_argument("--requests-lost", action="store_true",
                    help="the job requests topic was lost as well: nothing to rewind or plan again, so do not check "
                         "that the groups were rewound and the planners have read every request")
    ar.set_defaults(fn=_after_restore)
    rw = sub.add_parser("rewind-groups", help="move the planners' and the reconcilers' callback consumer groups back "
                        "to a moment (a restore point), so what they read since is read again (services stopped)")
    rw.add_argument("--to", required=True, type=_moment, metavar="TIME",
                    help="ISO 8601 with its time zone, e.g. 2026-12-04T03:00:00Z")
    rw.add_argument("--services-stopped", action="store_true",
                    help="confirm that the planners and the reconcilers are stopped")
    rw.add_argument("--planner-group", help="default <prefix>.planner (PACER_PLANNER_GROUP_ID, if you set it)")
    rw.add_argument("--callbacks-group", help="default <prefix>.reconciler.callbacks "
                    "(PACER_RECONCILER_CALLBACKS_GROUP, if you set it)")
    rw.set_defaults(fn=_rewind_groups)
