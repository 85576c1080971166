"""The Control API's adapters: Postgres (SQL in ``sql/*.sql``) and the DLQ topics (Kafka)."""
