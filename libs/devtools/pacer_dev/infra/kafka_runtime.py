"""The Apache Kafka runtime: official jars from Maven Central, cached per machine.

Kafka publishes no pip- or apt-installable broker, but its jars are on Maven Central.
Maven resolves the runtime classpath of `kafka-pom.xml` once into
`${PACER_CACHE_DIR:-~/.cache/pacer}/kafka-<version>/libs`, outside any checkout, so every
workspace and CI job on the machine shares one copy (~45 MB).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import time
from importlib import resources
from pathlib import Path

from pacer_dev.infra import process
from pacer_dev.infra.state import InfraError

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.1"
CACHE_DIR_ENV = "PACER_CACHE_DIR"
FETCH_TIMEOUT_S = 900.0
INSTALL_HINT = (
    "install a Java 17+ runtime and Maven (Debian/Ubuntu: "
    "`apt-get install openjdk-17-jre-headless maven`; macOS: `brew install openjdk maven`), "
    "or set PACER_KAFKA_BOOTSTRAP_SERVERS to use an existing broker"
)


def cache_root() -> Path:
    """`$PACER_CACHE_DIR`, else `~/.cache/pacer`."""
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pacer"


def require(tool: str) -> str:
    """Absolute path of `tool` on PATH, or an error that says what to install."""
    path = shutil.which(tool)
    if path is None:
        raise InfraError(f"`{tool}` was not found on PATH; it is needed to run a local Kafka: {INSTALL_HINT}")
    return path


def ensure_runtime() -> Path:
    """Return the directory of Kafka's runtime jars, fetching them with Maven once.

    A marker holding the pom's fingerprint is written only after a complete fetch (so an
    interrupted fetch is redone, and so is a fetch for an edited pom), and a file lock
    keeps concurrent callers, such as parallel test workers, from fetching twice.
    """
    home = cache_root() / f"kafka-{KAFKA_VERSION}"
    libs = home / "libs"
    marker = home / ".complete"
    pom = resources.files(__package__).joinpath("kafka-pom.xml").read_bytes()
    fingerprint = hashlib.sha256(pom + KAFKA_VERSION.encode()).hexdigest()
    if _marker_matches(marker, fingerprint):
        return libs
    with process.file_lock(home / ".lock"):
        if _marker_matches(marker, fingerprint):
            return libs  # another caller finished the fetch while we waited
        _fetch(home, pom, libs)
        marker.write_text(fingerprint)
    return libs


def _fetch(home: Path, pom: bytes, libs: Path) -> None:
    """Resolve the jars into a staging dir and move it into place only when complete."""
    mvn = require("mvn")
    pom_file = home / "pom.xml"
    pom_file.write_bytes(pom)
    staging = home / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    log.info("fetching Kafka %s jars from Maven Central into %s (one-time)", KAFKA_VERSION, libs)
    started = time.monotonic()
    argv = [mvn, "-q", "-B", "-f", str(pom_file), "dependency:copy-dependencies", "-DincludeScope=runtime"]
    argv += [f"-DoutputDirectory={staging}", f"-Dkafka.version={KAFKA_VERSION}"]
    try:
        result = subprocess.run(argv, cwd=home, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise InfraError(f"Maven did not fetch Kafka {KAFKA_VERSION} within {FETCH_TIMEOUT_S:.0f}s") from exc
    if result.returncode != 0 or not (staging / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        output = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        raise InfraError(f"Maven could not fetch Kafka {KAFKA_VERSION} (exit {result.returncode}):\n{output}")
    shutil.rmtree(libs, ignore_errors=True)
    os.replace(staging, libs)
    log.info("fetched Kafka %s runtime in %.1fs", KAFKA_VERSION, time.monotonic() - started)


def _marker_matches(marker: Path, fingerprint: str) -> bool:
    try:
        return marker.read_text() == fingerprint
    except OSError:
        return False
