"""Fault injection against real processes: ``make chaos`` (and its short form in ``make test``)."""
