"""The range of reconciler segment counts, defined once.

The reconciler's setting (``PACER_RECONCILER_SEGMENTS``), ``pacer migrate --event-segments``
and the event index it builds all accept this range; the chart's values schema states the
same bounds, and a deploy test holds it to them. One segment reads the log by position and
needs no index, so the index starts at two.
"""

from __future__ import annotations

EVENT_SEGMENTS_MIN = 1
EVENT_SEGMENTS_MAX = 1024
EVENT_SEGMENTS_INDEXED_MIN = 2
