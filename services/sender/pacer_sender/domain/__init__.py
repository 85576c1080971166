"""The sender's pure rules: pacing, outcome decisions, per-guid queues, offset bookkeeping."""
