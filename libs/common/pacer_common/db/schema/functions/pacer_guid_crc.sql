-- The CRC-32 of a guid's UTF-8 bytes: what librdkafka's consistent_random partitioner, with
-- which Pacer keys item commands by guid, takes modulo the partition count
-- (pacer_sender.domain.partitions). The sender's sweep uses it to read only the guids of the
-- partitions it owns. crc32() came in PostgreSQL 18: on an older server this returns NULL,
-- "cannot tell here", and the sweep reads every guid and keeps its own in Python, as before.
-- Re-applied at every migrate, so a server upgraded to 18 gets the CRC at its next migrate.
DO $do$
BEGIN
    EXECUTE format(
        $f$CREATE OR REPLACE FUNCTION pacer_guid_crc(p_guid text) RETURNS bigint
           LANGUAGE sql STABLE PARALLEL SAFE AS $fn$ SELECT %s $fn$$f$,
        CASE WHEN current_setting('server_version_num')::int >= 180000
             THEN $e$crc32(convert_to(p_guid, 'UTF8'))$e$
             ELSE 'NULL::bigint' END);
END
$do$;
