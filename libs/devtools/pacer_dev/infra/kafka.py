"""A single-node Apache Kafka (KRaft, combined broker+controller) without Docker.

The broker runs from the jars that `kafka_runtime` caches and keeps its config, data and
log under `<state>/kafka`. Ports and the cluster id are fixed when the broker is created,
so a restart (for example in a chaos test) brings the same cluster back on the same
address with its topics, offsets and messages intact.
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import time
import uuid
from importlib import resources
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from pacer_dev.infra import process
from pacer_dev.infra.kafka_runtime import ensure_runtime, require
from pacer_dev.infra.state import InfraError, KafkaRecord

log = logging.getLogger(__name__)

NODE_ID = 1
START_TIMEOUT_S = 120.0  # generous: a busy 2-core machine can take 25 s to start the broker
STOP_TIMEOUT_S = 30.0
MAIN_CLASS = "kafka.Kafka"

# A dev/test broker: a small fixed heap keeps several workspaces on one machine affordable.
JVM_OPTS = (
    "-Xms256m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)


def home_dir(state_dir: Path) -> Path:
    """Config, data (`data/`) and log of the broker belonging to `state_dir`."""
    return state_dir / "kafka"


def new_cluster_id() -> str:
    """A random cluster id as Kafka makes them (``Uuid.randomUuid``): base64url of 16 random
    bytes, never starting with '-', which the storage tool would read as an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def create(state_dir: Path) -> KafkaRecord:
    """Pick ports and a cluster id for a new broker; nothing is started yet."""
    port, controller_port = process.free_ports(2)
    cluster_id = new_cluster_id()
    home_dir(state_dir).mkdir(parents=True, exist_ok=True)
    return KafkaRecord(port=port, controller_port=controller_port, cluster_id=cluster_id)


def start(state_dir: Path, record: KafkaRecord) -> KafkaRecord:
    """Start the broker on its recorded ports and wait until it serves metadata."""
    java = require("java")
    libs = ensure_runtime()
    home = home_dir(state_dir)
    props = _write_config(home, record)
    runtime = ["-cp", f"{libs}/*", f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}"]
    _ensure_formatted([java, "-Xmx256m", *runtime], home, record)
    process.ensure_ports_available("Kafka", record.port, record.controller_port)

    logfile = home / "kafka.log"
    if logfile.exists():
        os.replace(logfile, home / "kafka.log.1")  # keep the previous run for post-mortems
    started = time.monotonic()
    # posix_spawn with setsid detaches the broker like Popen(start_new_session=True) but
    # leaves no Popen object to warn when the caller exits first; process.pid_alive
    # reaps the zombie if the broker dies while the caller is still around.
    record.pid = os.posix_spawn(
        java,
        [java, *JVM_OPTS, *runtime, MAIN_CLASS, str(props)],
        os.environ,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(logfile), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ],
        setsid=True,
    )
    log.info("Kafka starting (pid %d) on %s, log %s", record.pid, record.bootstrap, logfile)
    try:
        wait_ready(state_dir, record, timeout=START_TIMEOUT_S)
    except BaseException:
        process.terminate(record.pid, timeout=5.0, what="Kafka")
        record.pid = None
        raise
    log.info("Kafka ready on %s in %.1fs", record.bootstrap, time.monotonic() - started)
    return record


def stop(state_dir: Path, record: KafkaRecord, timeout: float = STOP_TIMEOUT_S) -> None:
    """Stop the broker: SIGTERM for a controlled shutdown, SIGKILL after `timeout`."""
    if record.pid is not None and is_running(state_dir, record):
        log.info("stopping Kafka (pid %d)", record.pid)
        process.terminate(record.pid, timeout=timeout, what="Kafka")
    record.pid = None


def is_running(state_dir: Path, record: KafkaRecord) -> bool:
    """True if the recorded pid is still our broker, not a recycled pid."""
    props = str(home_dir(state_dir) / "server.properties")
    return record.pid is not None and process.cmdline_matches(record.pid, MAIN_CLASS, props)


def wait_ready(state_dir: Path, record: KafkaRecord, *, timeout: float) -> None:
    """Wait until the broker lists itself in metadata; fail early if the JVM exits."""
    logfile = home_dir(state_dir) / "kafka.log"
    deadline = time.monotonic() + timeout
    while True:
        if record.pid is None or not process.pid_alive(record.pid):
            raise InfraError(f"Kafka exited during startup; last lines of {logfile}:\n{process.tail(logfile)}")
        if answers(record.bootstrap, timeout=2.0):
            return
        if time.monotonic() >= deadline:
            raise InfraError(
                f"Kafka on {record.bootstrap} not ready after {timeout:.0f}s; "
                f"last lines of {logfile}:\n{process.tail(logfile)}"
            )
        time.sleep(process.POLL_INTERVAL_S)


def answers(bootstrap: str, *, timeout: float) -> bool:
    """True if the broker at `bootstrap` returns metadata that includes our node."""
    host, _, port = bootstrap.rpartition(":")
    if host == process.LOOPBACK and not process.tcp_accepts(int(port)):
        return False  # nothing listens yet: skip the client, which would log connect errors
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 2000})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return NODE_ID in metadata.brokers


def _write_config(home: Path, record: KafkaRecord) -> Path:
    """(Re)write server.properties and the log4j2 config on every start, from the record."""
    home.mkdir(parents=True, exist_ok=True)
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{record.controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{record.port},CONTROLLER://127.0.0.1:{record.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{record.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(home / "data"),
        # One node: internal topics cannot be replicated, and there is nobody to wait for.
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # After a crash the restarted controller keeps the dead broker's registration until
        # its session expires (9 s by default); chaos tests restart often, so expire sooner.
        "broker.session.timeout.ms": "4000",
        "broker.heartbeat.interval.ms": "1000",
        # Senders use the KIP-848 consumer protocol: a dead member is noticed after this
        # session timeout (broker-side; 45 s by default), so keep it near the lease TTL.
        "group.consumer.session.timeout.ms": "10000",
        "group.consumer.min.session.timeout.ms": "6000",
        "group.consumer.heartbeat.interval.ms": "1000",
        "group.consumer.min.heartbeat.interval.ms": "1000",
        # Topics are created explicitly, as in production, so a misspelt name fails loudly.
        "auto.create.topics.enable": "false",
        "num.partitions": "8",
        "log.retention.hours": "24",
    }
    props = home / "server.properties"
    body = "".join(f"{key}={value}\n" for key, value in settings.items())
    props.write_text("# Written by pacer_dev.infra.kafka on every start; edits are overwritten.\n" + body)
    log4j = resources.files(__package__).joinpath("log4j2.properties").read_text()
    (home / "log4j2.properties").write_text(log4j)
    return props


def _ensure_formatted(jvm: list[str], home: Path, record: KafkaRecord) -> None:
    """Format the KRaft log dir once; formatting it again would be refused."""
    if (home / "data" / "meta.properties").exists():
        return
    log.info("formatting Kafka storage in %s (cluster id %s)", home / "data", record.cluster_id)
    argv = [*jvm, "kafka.tools.StorageTool", "format", "-t", record.cluster_id, "-c", str(home / "server.properties")]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise InfraError(f"Kafka storage format failed (exit {result.returncode}):\n{result.stdout}{result.stderr}")
