"""Pacer's processes on one machine: the fake gateway and the services, as real processes.

Used by ``make up``/``make down``, the demo and the end-to-end and chaos tests. Every
process is started in its own session (so ``make up`` can return), logs to
``<state>/logs/<name>.log``, and is recorded in ``<state>/services.json`` so a later
command can stop it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pacer_dev.fakegateway.process import free_port
from pacer_dev.infra import Infra
from pacer_dev.infra.process import wait_for

SERVICES = ("planner", "sender", "reconciler", "control", "intake")
# The `default` tenant's callback secret on a local stack (make up, tests): not a secret anywhere else.
LOCAL_CALLBACK_SECRET = "local-callback-secret"
log = logging.getLogger(__name__)


@dataclass
class Proc:
    name: str
    kind: str
    pid: int
    port: int
    log: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                return False
        except ChildProcessError:
            pass  # not our child (started by an earlier command): probe with signal 0
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True


@dataclass
class Stack:
    state_dir: Path
    infra: Infra
    topic_prefix: str = "pacer"
    env_extra: dict[str, str] = field(default_factory=dict)
    gateway_url: str | None = None
    procs: dict[str, Proc] = field(default_factory=dict)

    # -- environment ----------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, **self.infra.env(), "PACER_TOPIC_PREFIX": self.topic_prefix, **self.env_extra, **extra}
        if self.gateway_url:
            env["PACER_GATEWAY_URL"] = self.gateway_url
        return env

    # -- processes ------------------------------------------------------------------------
    def _spawn(self, name: str, kind: str, argv: list[str], port: int, env: dict[str, str]) -> Proc:
        logs = self.state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{name}.log"
        with open(log_path, "ab") as out:
            p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        proc = Proc(name, kind, p.pid, port, str(log_path))
        self.procs[name] = proc
        self.save()
        return proc

    def start_gateway(self, *, wait: bool = True, **knobs: Any) -> str:
        """The fake gateway; returns its URL. ``wait=False`` returns as soon as it is spawned
        (its URL is already known, so services can be started beside it); ``start_services``
        or ``wait_all`` then waits for it with them."""
        from pacer_dev.fakegateway.process import knob_args

        port = free_port()
        argv = [sys.executable, "-m", "pacer_dev.fakegateway.main", "--host", "127.0.0.1", "--port", str(port),
                *knob_args(knobs)]
        proc = self._spawn("gateway", "gateway", argv, port, self.env())
        self.gateway_url = proc.url
        self.save()
        if wait:
            self.wait_ready(proc, 20.0)
        return self.gateway_url

    def start_service(self, kind: str, name: str | None = None, *, wait: bool = True, **env: str) -> Proc:
        if kind not in SERVICES:
            raise ValueError(f"unknown service {kind!r}; one of {SERVICES}")
        name = name or kind
        port = free_port()
        upper = kind.upper()
        extra = {f"PACER_{upper}_PORT": str(port), **env}
        if kind == "sender":
            extra.setdefault("PACER_SENDER_OWNER", f"{name}-{port}")
        proc = self._spawn(name, kind, [sys.executable, "-m", f"pacer_{kind}"], port, self.env(**extra))
        if wait:
            self.wait_ready(proc)
        return proc

    def start_services(self, *services: str | tuple[str, str]) -> list[Proc]:
        """Start several services together (a kind, or a ``(kind, name)`` pair) and wait until
        each is ready: each takes seconds to import and connect, and they need not queue."""
        procs = [self.start_service(*((s,) if isinstance(s, str) else s), wait=False) for s in services]
        self.wait_all()
        return procs

    def wait_all(self, timeout_s: float = 60.0) -> None:
        """Wait until every process started so far answers (a gateway or a service started
        with ``wait=False``; one already up answers at once)."""
        for proc in list(self.procs.values()):
            if proc.kind == "gateway" or proc.kind in SERVICES:
                self.wait_ready(proc, timeout_s)

    def start_intake(self, name: str = "intake", secret: str = LOCAL_CALLBACK_SECRET) -> Proc:
        """The callback intake, with ``secret`` as the `default` tenant's callback secret; the
        fake gateway (if it is ours) posts the `default` tenant's callbacks to it, signed."""
        proc = self.start_service("intake", name, PACER_INTAKE_DEFAULT_CALLBACK_SECRET=secret)
        if "gateway" in self.procs and self.gateway_url:
            req = urllib.request.Request(f"{self.gateway_url}/_admin/tenants/default", method="PUT",
                                         data=json.dumps({"callback_secret": secret,
                                                          "callback_url": f"{proc.url}/callbacks/default"}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=5.0):
                pass
        return proc

    def start_prometheus(self, interval_s: float = 1.0) -> Proc:
        """A Prometheus (Debian's binary, our own process) scraping every service started so
        far, with Pacer's alert rules loaded; its URL is the returned process's ``url``."""
        from pacer_dev import prometheus

        targets: dict[str, list[str]] = {}
        for p in self.procs.values():
            if p.kind in SERVICES:
                targets.setdefault(f"pacer-{p.kind}", []).append(f"127.0.0.1:{p.port}")
        directory = self.state_dir / "prometheus"
        config = prometheus.write_config(directory, targets, interval_s)
        port = free_port()
        proc = self._spawn("prometheus", "prometheus", prometheus.argv(config, directory / "data", port), port,
                           self.env())
        prometheus.Client(proc.url).wait_ready()
        return proc

    def wait_ready(self, proc: Proc, timeout_s: float = 60.0) -> None:
        """Until ``proc`` answers its readiness check (the fake gateway's ``/healthz``, a
        service's ``/readyz``); raises if it exits first or time runs out."""
        check = "/healthz" if proc.kind == "gateway" else "/readyz"

        def answers() -> bool:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited during start-up; see {proc.log}")
            try:
                with urllib.request.urlopen(f"{proc.url}{check}", timeout=1.0) as resp:
                    return bool(resp.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        if not wait_for(answers, timeout=timeout_s):
            raise RuntimeError(f"{proc.name} not ready after {timeout_s:g}s; see {proc.log}")

    def metric(self, name: str, metric: str, labels: dict[str, str] | None = None,
               timeout_s: float = 2.0) -> float | None:
        """The sum of ``metric``'s samples carrying ``labels`` on process ``name``'s /metrics;
        None while it does not answer (within ``timeout_s``: it may be stopped) or has no such
        sample."""
        from prometheus_client.parser import text_string_to_metric_families

        try:
            with urllib.request.urlopen(f"{self.procs[name].url}/metrics", timeout=timeout_s) as resp:
                text = resp.read().decode()
        except OSError:
            return None
        values = [s.value for family in text_string_to_metric_families(text) for s in family.samples
                  if s.name == metric and all(s.labels.get(k) == v for k, v in (labels or {}).items())]
        return float(sum(values)) if values else None

    def signal(self, name: str, sig: signal.Signals) -> None:
        os.kill(self.procs[name].pid, sig)

    def stop(self, *names: str, timeout_s: float = 30.0) -> None:
        """SIGTERM (finish the item in hand, commit, exit), then SIGKILL after the timeout;
        several names stop together, within one timeout."""
        procs = [self.procs[n] for n in names if n in self.procs]
        for proc in procs:
            if proc.alive():
                os.kill(proc.pid, signal.SIGTERM)
        wait_for(lambda: not any(p.alive() for p in procs), timeout=timeout_s)
        for proc in procs:
            if proc.alive():
                os.kill(proc.pid, signal.SIGKILL)
                while proc.alive():
                    time.sleep(0.05)
            del self.procs[proc.name]
        self.save()

    def kill(self, name: str) -> None:
        """kill -9: no clean-up at all."""
        proc = self.procs.pop(name)
        if proc.alive():
            os.kill(proc.pid, signal.SIGKILL)
            while proc.alive():
                time.sleep(0.02)
        self.save()

    def stop_all(self) -> None:
        """The services together, then the gateway (a service may still be finishing a call)."""
        self.stop(*[n for n in self.procs if n != "gateway"])
        self.stop("gateway")

    def dispose(self) -> None:
        """Stop every process and delete this stack's topics: for a stack made for one run (a
        benchmark's, a chaos scenario's, a test's), whose topics nothing reads afterwards.
        Against an external cluster nothing else would ever delete them."""
        self.stop_all()
        drop_topics_or_warn({"bootstrap.servers": self.infra.kafka_bootstrap}, self.topic_prefix)

    # -- persistence for make up / make down ---------------------------------------------
    def save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        data = {"topic_prefix": self.topic_prefix, "gateway_url": self.gateway_url, "env_extra": self.env_extra,
                "procs": [asdict(p) for p in self.procs.values()]}
        (self.state_dir / "services.json").write_text(json.dumps(data, indent=2))

    @classmethod
    def load(cls, state_dir: Path, infra: Infra) -> Stack:
        path = state_dir / "services.json"
        stack = cls(state_dir, infra)
        if path.exists():
            data = json.loads(path.read_text())
            stack.topic_prefix = data["topic_prefix"]
            stack.gateway_url = data["gateway_url"]
            stack.env_extra = data.get("env_extra", {})
            stack.procs = {p["name"]: Proc(**p) for p in data["procs"]}
        return stack


def prepare(database_url: str, kafka_config: dict[str, str], topic_prefix: str,
            item_command_partitions: int = 16) -> None:
    """Migrate the database and create the topics: what a fresh deployment needs first."""
    from pacer_common.cli import topic_layout
    from pacer_common.db.migrate import migrate
    from pacer_common.kafka import ensure_topics
    from pacer_common.settings import KafkaSettings

    migrate(database_url)
    k = KafkaSettings(kafka_bootstrap_servers=kafka_config["bootstrap.servers"], topic_prefix=topic_prefix,
                      item_command_partitions=item_command_partitions)
    ensure_topics(kafka_config, topic_layout(k))


def drop_topics(kafka_config: dict[str, str], topic_prefix: str, timeout_s: float = 30.0) -> list[str]:
    """Delete every topic named ``<topic_prefix>.…``; returns their names. A run that leaves
    its topics behind makes a local broker slower to start with every run (11,600 partitions:
    55 s, then over the 120 s it is given) and fills an external cluster."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(dict(kafka_config))
    names = sorted(t for t in admin.list_topics(timeout=timeout_s).topics if t.startswith(f"{topic_prefix}."))
    deleted = []
    for name, fut in (admin.delete_topics(names, operation_timeout=timeout_s) if names else {}).items():
        try:
            fut.result()
            deleted.append(name)
        except KafkaException as exc:  # deleted meanwhile: the broker's metadata lags a deletion
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
    return sorted(deleted)


def drop_topics_or_warn(kafka_config: dict[str, str], topic_prefix: str, timeout_s: float = 10.0) -> None:
    """``drop_topics`` at the end of a run: a broker that cannot be reached (stopped by the run,
    or gone) leaves the topics with a warning instead of hiding how the run ended."""
    from confluent_kafka import KafkaException

    try:
        drop_topics(kafka_config, topic_prefix, timeout_s)
    except KafkaException as exc:
        log.warning("topics %s.* not deleted: %s", topic_prefix, exc)


def create_database(server_url: str, label: str) -> str:
    """A new, migrated database on the server of ``server_url``; returns its URL."""
    import uuid

    import psycopg

    from pacer_common.db.migrate import migrate

    base = server_url.rsplit("/", 1)[0]
    name = f"{label.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    migrate(f"{base}/{name}")
    return f"{base}/{name}"


def drop_database(url: str) -> None:
    import psycopg

    base, _, name = url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
