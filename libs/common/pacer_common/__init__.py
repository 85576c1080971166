"""pacer_common."""
