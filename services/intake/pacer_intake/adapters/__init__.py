"""Kafka and Postgres for the callback intake."""
