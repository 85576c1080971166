"""The collector is off inside ``gcpause.paused()`` and as it was after, whatever happens
inside; what a pause built is left out of collections until the next pause, then collected."""

from __future__ import annotations

import gc
import weakref

import pytest

from pacer_common import gcpause


@pytest.fixture(autouse=True)
def _collector_restored() -> object:
    yield
    gc.unfreeze()
    gc.enable()


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


def test_what_a_pause_built_is_frozen_until_the_next_pause_then_collected() -> None:
    with gcpause.paused():
        built = [[i] for i in range(1000)]
        cycle = Node()
    assert gc.get_freeze_count() >= len(built)
    gone = weakref.ref(cycle)
    del cycle
    gc.collect()
    assert gone() is not None  # frozen: no pass visits it
    with gcpause.paused():
        assert gc.get_freeze_count() == 0
    gc.unfreeze()
    gc.collect()
    assert gone() is None
