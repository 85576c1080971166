"""Planning, pure: a job request becomes a job, its shards and its items."""
