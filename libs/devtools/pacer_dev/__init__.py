"""pacer_dev."""
