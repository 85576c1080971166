-- An audit record of `pacer dead-letters republish --raw`: a refused job request sent again
-- unchecked, straight to Kafka, by the command line, in the Control API's shape and steps
-- (`republish_attempt` before the send, then `republish` or `republish_failed`).
SELECT pacer_audit('cli', %(action)s::text, 'dead_letter', %(where)s::text, %(reason)s::text, %(before)s::jsonb,
                   %(after)s::jsonb)
