-- The queued items by their guid's bucket: the CRC that Kafka's partitioner takes, modulo
-- 5760 (pacer_sender.domain.partitions.GUID_BUCKETS). A sender's sweep for lost doorbells
-- walks the buckets of its own partitions through it and reads its own guids alone
-- (waiting_guids.sql); without it, every queued guid.
--
-- It exists only where the CRC does (PostgreSQL 18 and later): a server upgraded to 18 gets
-- it at its next migrate, built online (pacer_common.db.online_indexes).
-- when: pacer_guid_crc('') IS NOT NULL
CREATE INDEX items_guid_queued_bucket ON items ((pacer_guid_crc(guid) % 5760), guid)
    WHERE status IN ('pending', 'waiting_retry');
