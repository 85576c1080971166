"""pacer-intake: the gateway callback intake (POST /callbacks/{tenant} → Kafka)."""
