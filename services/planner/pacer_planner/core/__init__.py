"""The planner's use cases: job requests in (``intake``), requery target sets paged (``paging``)."""

from __future__ import annotations

from pacer_planner.core.intake import Handled, Planner, commands_for, item_commands
from pacer_planner.core.paging import PagingConfig, PagingSupervisor, TargetPager

__all__ = ["Handled", "PagingConfig", "PagingSupervisor", "Planner", "TargetPager", "commands_for", "item_commands"]
