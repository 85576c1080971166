-- The audit record of `pacer dead-letters republish --raw`: a refused job request sent again
-- unchecked, straight to Kafka, by the command line (the Control API records its own
-- republish, in the same shape).
SELECT pacer_audit('cli', 'republish', 'dead_letter', %(where)s::text, %(reason)s::text, %(before)s::jsonb,
                   %(after)s::jsonb)
