CREATE OR REPLACE FUNCTION pacer_content_hash(p_message jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $fn$ SELECT md5(p_message::text) $fn$;
