-- In-doubt items of the guids keeping a quiet a gateway asked of them, which the verifier
-- leaves out of its reads while it lasts (due_in_doubt.sql; for an hour at most, a bound this
-- count does not apply). Read with the slow counts (stall_count_every_s): it reads every
-- in-doubt item (items_recovery) while any guid is quiet, and none otherwise (the subquery of
-- the CASE is run only when its condition holds).
SELECT CASE WHEN EXISTS (SELECT 1 FROM guid_leases WHERE gateway_quiet_until > now())
            THEN (SELECT count(*) FROM items i JOIN guid_leases g ON g.guid = i.guid
                  WHERE i.status = 'recovery_pending' AND g.gateway_quiet_until > now())
            ELSE 0 END AS in_doubt_quiet
