"""The reconciler's pure rules: progress projection and verification decisions."""
