"""pacer_reconciler."""
