"""Pacer's Control API: operators pause, resume, cancel, retry and inspect over HTTP."""
