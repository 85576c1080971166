"""pacer_planner."""
