"""Postgres access shared by the services: pool, migrations, named queries, transitions."""
