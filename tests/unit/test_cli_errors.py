"""``pacer`` says what went wrong in one line, with the exit code that means it: a setting not
set, a file not there, an argument out of range, a Control API answering an error of its own.
None of these is a traceback."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pacer_common.cli import main
from pacer_common.cli.common import EXIT_UNAVAILABLE, EXIT_USAGE

SETTINGS = ("PACER_DATABASE_URL", "PACER_KAFKA_BOOTSTRAP_SERVERS", "PACER_CONTROL_URL", "PACER_TOKEN")


def pacer(*args: str) -> int:
    with pytest.raises(SystemExit) as ended:
        main(list(args))
    return int(ended.value.code or 0)


@pytest.fixture(autouse=True)
def nothing_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)


def test_a_setting_not_set_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert pacer("topics") == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("pacer topics: settings missing or not valid: KafkaSettings: kafka_bootstrap_servers")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert pacer("locks") == EXIT_USAGE
    assert "PostgresSettings: database_url" in capsys.readouterr().err


def test_a_file_that_is_not_there_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")
    assert pacer("publish", str(tmp_path / "request.json")) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("pacer publish: ") and "request.json" in err and "Traceback" not in err


def test_a_count_below_one_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    assert pacer("locks", "--limit", "-1") == EXIT_USAGE
    assert "a count of at least 1, not '-1'" in capsys.readouterr().err


class Failing(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = b'{"detail": "internal error 0123456789ab: the control service\'s log has it"}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def failing_control() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_a_control_api_error_of_its_own_is_unavailable_not_refused(
        failing_control: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PACER_CONTROL_URL", failing_control)
    monkeypatch.setenv("PACER_TOKEN", "token")
    assert pacer("cancel", "0190aaaa-0000-7000-8000-000000000000") == EXIT_UNAVAILABLE
    assert "internal error 0123456789ab" in capsys.readouterr().err
