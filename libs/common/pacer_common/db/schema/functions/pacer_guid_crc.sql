-- The CRC-32 of a guid's UTF-8 bytes: what librdkafka's consistent_random partitioner, with
-- which Pacer keys item commands by guid, takes modulo the partition count
-- (pacer_sender.domain.partitions). The sender's sweep uses it to read only the guids of the
-- partitions it owns. crc32() came in PostgreSQL 18: on an older server this returns NULL,
-- "cannot tell here", and the sweep reads every guid and keeps its own in Python, as before.
-- Re-applied at every migrate, so a server upgraded to 18 gets the CRC at its next migrate.
--
-- IMMUTABLE, so that an index can hold it: convert_to() is only STABLE because conversions
-- between encodings can be added (CREATE CONVERSION); a database's encoding is fixed and
-- Pacer adds none, so a guid's bytes, and its CRC, never change.
--
-- On 18 and later the queued guids are also indexed by bucket (the CRC modulo 5760), so that
-- a sender's sweep reads its own partitions' guids alone: schema/indexes/items_guid_queued_bucket.sql,
-- built online after the functions.
DO $do$
BEGIN
    EXECUTE format(
        $f$CREATE OR REPLACE FUNCTION pacer_guid_crc(p_guid text) RETURNS bigint
           LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT %s $fn$$f$,
        CASE WHEN current_setting('server_version_num')::int >= 180000
             THEN $e$crc32(convert_to(p_guid, 'UTF8'))$e$
             ELSE 'NULL::bigint' END);
END
$do$;
