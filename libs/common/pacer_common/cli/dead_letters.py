"""``pacer dead-letters``: what the planner and the callback intake refused, read back.

Every refused job request is on ``<prefix>.job-requests.dlq`` and every refused callback on
``<prefix>.callbacks.dlq``, as it came, with the reason in the ``pacer-error-reason`` header.
``list`` shows the last records with their reasons; ``show`` prints one record's original
bytes (to fix and ``pacer publish``); ``republish`` sends a refused job request again, as it
is, once what refused it is fixed elsewhere (a bug after an ``internal error``, a tenant
created, a quota raised): through the Control API, as ``PACER_TOKEN``, with its role check,
validation and audit record; ``--raw`` sends it unchecked, straight to Kafka, and records
that in the audit log itself, as the Control API does: ``republish_attempt`` committed before
the request is sent, then ``republish`` once the broker acknowledged it or
``republish_failed`` with the error. A record that holds only part of a request (too large to
keep whole) is never sent again. Reading joins no consumer group and commits nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

import psycopg
from confluent_kafka import KafkaException
from psycopg.types.json import Jsonb
from pydantic import ValidationError

from pacer_common import dead_letters as dlq
from pacer_common.cli.common import EXIT_NOT_FOUND, EXIT_REFUSED, control_call, count, one_line
from pacer_common.db.sql import query
from pacer_common.domain.dead_letters import SEARCH_DEPTH, DeadLetter, matching, read_depth
from pacer_common.settings import KafkaSettings, PostgresSettings

REASON_CHARS = 300  # a listed reason's length; `show` prints all of it


def _where(text: str) -> tuple[int, int]:
    part, sep, offset = text.partition(":")
    if not sep or not part.isdigit() or not offset.isdigit():
        raise argparse.ArgumentTypeError(f"PARTITION:OFFSET as `pacer dead-letters list` prints it, not {text!r}")
    return int(part), int(offset)


def _time(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"an ISO 8601 time such as 2026-12-01T14:00+08:00, not {text!r}") from None
    return at if at.tzinfo else at.astimezone()  # a time without an offset is the local one


def _topic(k: KafkaSettings, args: argparse.Namespace) -> str:
    return dlq.topic_of(k, "callbacks" if getattr(args, "callbacks", False) else "requests")


def _list(args: argparse.Namespace) -> int:
    k = KafkaSettings()
    topic = _topic(k, args)
    try:
        found = dlq.newest(k, topic, read_depth(args.last, args.tenant, args.key), before=args.before).letters
    except dlq.TopicMissing:
        found = []  # nothing was ever refused there
    letters = matching(found, args.tenant, args.key)[-args.last:]
    if args.json:
        for d in letters:
            print(json.dumps(d.summary(), ensure_ascii=False))
        return 0
    print(f"{topic}: {len(letters)} record(s), oldest first")
    for d in letters:
        s = d.summary()
        reason = str(s["reason"])
        reason = reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "…"
        who = s["key"] or s["tenant"] or "-"
        print(f"{s['where']:>10}  {s['at']}  {s['source'] or '-':8} {who}  {s['bytes']} bytes  {reason}")
    return 0


def _found(args: argparse.Namespace) -> tuple[str, DeadLetter | None]:
    """The record ``args.where`` names, or None (and why, on stderr)."""
    k = KafkaSettings()
    topic = _topic(k, args)
    try:
        letter = dlq.one(k, topic, args.where)
    except dlq.TopicMissing:
        letter = None
    if letter is None:
        print(f"no record {args.where[0]}:{args.where[1]} on {topic} (see `pacer dead-letters list`)", file=sys.stderr)
    return topic, letter


def _show(args: argparse.Namespace) -> int:
    topic, letter = _found(args)
    if letter is None:
        return EXIT_NOT_FOUND
    print(f"{topic} {letter.where} at {letter.at.isoformat()}: {letter.reason}", file=sys.stderr)
    sys.stdout.buffer.write(letter.value)
    sys.stdout.buffer.flush()
    return 0


def _republish(args: argparse.Namespace) -> int:
    if not args.raw:  # the Control API's republish: its role check, the planner's validation, its audit record
        partition, offset = args.where
        return control_call("POST", f"/dead-letters/requests/{partition}/{offset}/republish",
                            exits={422: EXIT_REFUSED},  # the planner would refuse it again
                            json={"reason": args.reason} if args.reason else {})
    k = KafkaSettings()
    url = PostgresSettings().database_url.get_secret_value()
    topic, letter = _found(args)
    if letter is None:
        return EXIT_NOT_FOUND
    if (why := letter.not_republishable()) is not None:
        print(f"{topic} {letter.where} not republished: {why}", file=sys.stderr)
        return EXIT_REFUSED
    sent: dict[str, object] = {"key": letter.key_text, "tenant": letter.tenant, "raw": True}
    # Each record commits on its own, and none is open while the broker is waited on: no
    # request goes out without a record of it, and none says it was sent unless the broker did.
    with psycopg.connect(url, autocommit=True) as conn:
        def record(action: str, after: dict[str, object]) -> None:
            conn.execute(query("republish_audit"), {
                "action": action, "where": f"{topic}:{letter.where}", "reason": args.reason,
                "before": Jsonb({"reason": letter.reason, "at": letter.at.isoformat()}), "after": Jsonb(after)})

        record("republish_attempt", sent)
        try:
            dlq.republish(k, topic, letter)
        except BaseException as exc:  # Ctrl-C during the wait too: it may have been sent, or not
            try:
                record("republish_failed", {**sent, "error": str(exc).strip() or type(exc).__name__})
            except psycopg.Error as db:
                print(f"the failure is not audited (the database cannot be reached: {str(db).strip()}): its record "
                      "says it was attempted", file=sys.stderr)
            raise
        print(f"republished {topic} {letter.where} to {k.job_requests}, unchecked"
              f"{'' if letter.key is None else ' (key ' + letter.key.decode(errors='replace') + ')'}")
        try:
            record("republish", sent)
        except psycopg.Error as db:
            print(f"its audit record says only that it was attempted: the database could not be reached to record "
                  f"it as sent ({str(db).strip()})", file=sys.stderr)
    return 0


def add_dead_letter_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``pacer dead-letters list|show|republish``, on ``pacer``'s subcommand parsers."""
    dl = sub.add_parser("dead-letters", help="refused job requests (and callbacks): list them with their reasons, "
                        "print one as it came, send a job request again")
    dl_sub = dl.add_subparsers(dest="dead_letters_cmd", required=True)
    ls = dl_sub.add_parser("list", help="the last records, oldest first, with their reasons")
    ls.add_argument("--last", type=count, default=20, help="how many (default 20)")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    ls.add_argument("--key", help="only records with this key (a job request's id as its publisher keyed it), among "
                    f"the last {SEARCH_DEPTH:,} of each partition")
    ls.add_argument("--tenant", help=f"only this tenant's records, among the last {SEARCH_DEPTH:,} of each partition")
    ls.add_argument("--before", type=_time, metavar="TIME", help="the last records written before TIME (ISO 8601; "
                    "without an offset, the local time): what was refused around an incident")
    sh = dl_sub.add_parser("show", help="one record's original bytes on stdout (its reason on stderr)")
    for p in (ls, sh):
        p.add_argument("--callbacks", action="store_true", help="the callbacks' DLQ, not the job requests'")
    sh.add_argument("where", type=_where, metavar="PARTITION:OFFSET")
    rp = dl_sub.add_parser("republish", help="send a refused job request to the job requests topic again, as it is,"
                           " through the Control API (PACER_CONTROL_URL, PACER_TOKEN of a tech_admin): checked as the"
                           " planner checks it, and audited")
    rp.add_argument("where", type=_where, metavar="PARTITION:OFFSET")
    rp.add_argument("--reason", help="why (kept in the audit log)")
    rp.add_argument("--raw", action="store_true", help="unchecked, straight to Kafka (the Kafka and Postgres "
                    "settings, no token): for a request the planner's validation refuses wrongly; audited as "
                    "the Control API audits it (actor `cli`): republish_attempt before the send, then "
                    "republish, or republish_failed with the error")
    ls.set_defaults(fn=_list)
    sh.set_defaults(fn=_show)
    rp.set_defaults(fn=_republish)


def refusal_of(request_id: str, within_last: int = SEARCH_DEPTH) -> str:
    """For ``pacer status`` of a request that is no job: the planner's latest refusal of it
    among the last ``within_last`` records of each partition of the job requests' DLQ, or
    what to think if there is none (or the DLQ cannot be read)."""
    try:
        k = KafkaSettings()
    except ValidationError as exc:
        return f"the job requests' DLQ could not be read to tell whether the planner refused it: {one_line(exc)}"
    try:
        found = matching(dlq.newest(k, k.job_requests_dlq, within_last, keep_bytes=0).letters, key=request_id)
    except (KafkaException, dlq.TopicMissing, TimeoutError) as exc:
        return f"{k.job_requests_dlq} could not be read to tell whether the planner refused it: {exc}"
    if not found:
        return (f"none of the last {within_last} records of each partition of {k.job_requests_dlq} is it: not"
                " planned yet (see the planner's consumer lag), or never published")
    d = max(found, key=lambda d: (d.at, d.partition, d.offset))
    return (f"the planner refused it at {d.at.isoformat(timespec='seconds')} ({k.job_requests_dlq} {d.where};"
            f" `pacer dead-letters show {d.where}`): {d.reason}")
