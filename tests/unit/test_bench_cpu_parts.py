"""The benches' CPU split: Postgres' processes told apart by the titles they set, and the
parts printed beside the role totals."""
from bench.common import _postgres_part, per_unit


def test_postgres_processes_are_told_apart_by_their_titles() -> None:
    assert _postgres_part(b"/opt/pg/bin/postgres\x00-D\x00/data\x00") == "postmaster"
    assert _postgres_part(b"postgres: autovacuum worker bench_1\x00") == "autovacuum"
    assert _postgres_part(b"postgres: autovacuum launcher\x00") == "autovacuum"
    assert _postgres_part(b"postgres: walwriter\x00") == "walwriter"
    assert _postgres_part(b"postgres: checkpointer\x00") == "checkpointer"
    assert _postgres_part(b"postgres: background writer\x00") == "background_writer"
    assert _postgres_part(b"postgres: postgres bench_1 127.0.0.1(40112) idle\x00") == "backend"


def test_parts_follow_the_role_totals_largest_first_and_tiny_ones_left_out() -> None:
    spent = {"sender": 2.0, "postgres": 1.5, "postgres:backend": 1.0, "postgres:walwriter": 0.4999,
             "postgres:checkpointer": 0.0001, "driver": 0.01}
    line = per_unit(spent, 1000, 1000, "cpu_ms_per_item")
    assert line == ("cpu_ms_per_item_postgres=1.500 cpu_ms_per_item_sender=2.000 cpu_ms_per_item_driver=0.010 "
                    "cpu_ms_per_item_postgres_parts=backend:1.000/walwriter:0.500")


def test_no_postgres_no_parts_field() -> None:
    assert per_unit({"sender": 1.0}, 10, 1000, "x") == "x_sender=100.000"
