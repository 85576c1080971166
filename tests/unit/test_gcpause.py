"""The collector is off inside ``gcpause.paused()`` and as it was after, whatever happens
inside; what a pause built is left out of collections until the next pause, then collected.
``tune()`` sets the thresholds and the time collections take is counted and exported."""

from __future__ import annotations

import gc
import weakref

import pytest

from pacer_common import gcpause
from pacer_common.metrics import service_registry


@pytest.fixture(autouse=True)
def _collector_restored() -> object:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.enable()
    gc.set_threshold(*thresholds)
    if gcpause._timed in gc.callbacks:
        gc.callbacks.remove(gcpause._timed)


def test_tune_sets_the_thresholds_and_counts_collection_time_once() -> None:
    gcpause.tune((50_000, 20, 20))
    gcpause.tune((40_000, 10, 5))
    assert gc.get_threshold() == (40_000, 10, 5)
    assert gc.callbacks.count(gcpause._timed) == 1  # tuning again does not count twice
    before = gcpause.pause_seconds()
    for _ in range(3):
        gc.collect()  # a full collection: generation 2
    after = gcpause.pause_seconds()
    assert after[2] > before[2]
    assert after[0] == before[0] and after[1] == before[1]


def test_collection_time_is_exported_by_generation() -> None:
    registry = service_registry("test")
    assert registry.get_sample_value("pacer_gc_pause_seconds_total", {"generation": "2"}) is None  # not tuned
    gcpause.tune(gc.get_threshold())
    gc.collect()
    exported = registry.get_sample_value("pacer_gc_pause_seconds_total", {"generation": "2"})
    assert exported is not None and exported == pytest.approx(gcpause.pause_seconds()[2]) and exported > 0


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_inside_and_restored_after(enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    with pytest.raises(KeyError), gcpause.paused():
        assert not gc.isenabled()
        with gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # an inner pause does not end the outer one
        raise KeyError("boom")
    assert gc.isenabled() is enabled


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_what_a_pause_built_is_frozen_and_its_garbage_collected_by_a_pause_a_full_interval_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gcpause, "_last_full", [0.0])
    monkeypatch.setattr(gcpause, "FULL_EVERY_S", float("inf"))  # no full collection for now
    with gcpause.paused():
        built = [[i] for i in range(1000)]
        cycle = Node()
    assert gc.get_freeze_count() >= len(built)
    gone = weakref.ref(cycle)
    del cycle
    gc.collect()
    assert gone() is not None  # frozen: no pass visits it
    for _ in range(3):  # pauses within the interval: unfrozen and frozen again, never collected
        with gcpause.paused():
            assert gc.get_freeze_count() == 0
    assert gone() is not None
    monkeypatch.setattr(gcpause, "FULL_EVERY_S", 0.0)  # the interval over
    with gcpause.paused():
        assert gone() is None, "the next pause collected it"


def test_the_thresholds_setting_is_read_from_the_environment_and_refuses_a_zero(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from pacer_common.settings import OpsSettings

    monkeypatch.setenv("PACER_GC_THRESHOLDS", "[20000, 15, 5]")
    assert OpsSettings().gc_thresholds == (20_000, 15, 5)
    monkeypatch.setenv("PACER_GC_THRESHOLDS", "[0, 10, 10]")
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        OpsSettings()
