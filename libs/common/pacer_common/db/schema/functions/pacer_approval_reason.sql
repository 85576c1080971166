-- Why a new job waits for approval, or NULL: the planner's policy applied at insert.
CREATE OR REPLACE FUNCTION pacer_approval_reason(p_total bigint, p_message jsonb, p_above bigint, p_new_content boolean)
RETURNS text
LANGUAGE plpgsql STABLE AS $fn$  -- plpgsql: bound late, so pacer_content_hash may be created after it
BEGIN
    RETURN CASE
        WHEN p_above IS NOT NULL AND p_total > p_above
            THEN format('awaiting approval: %s items, above %s', p_total, p_above)
        WHEN p_new_content AND NOT EXISTS (
                SELECT 1 FROM approved_contents a WHERE a.content_hash = pacer_content_hash(p_message))
            THEN 'awaiting approval: new content (first send of this message)'
    END;
END
$fn$;
