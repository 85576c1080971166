-- The live rows under a prefix (segment leases and replica memberships), and the removal of
-- memberships of replicas gone for an hour. Only the database clock decides what is live.
WITH gone AS (
    DELETE FROM leader_leases
    WHERE name LIKE %(prefix)s || '/member/%%' AND expires_at < clock_timestamp() - interval '1 hour'
)
SELECT name, holder FROM leader_leases
WHERE name LIKE %(prefix)s || '/%%' AND expires_at > clock_timestamp()
