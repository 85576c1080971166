"""Stored functions and triggers as they are today, one per file; see ``pacer_common.db.sql``."""
