"""pacer_sender."""
