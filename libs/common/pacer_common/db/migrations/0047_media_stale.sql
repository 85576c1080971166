-- A media the gateway no longer knows (it restarted, or forgot the media before
-- PACER_SENDER_MEDIA_REUSE_S): a send of its mediaId is refused with the gateway's bad_params
-- code. The sender marks the record `stale` (settled_by `send`, the refusal in `reason`), and
-- the next item of the media uploads it again as the next generation, under a key of its own;
-- without it the record stayed `ready` and every later item failed until the reuse ran out.
--
-- url_hash is now sha256 over the url, the kind and the file name (pacer_sender.domain.media.
-- media_hash), not over the url alone: no hash of one form equals one of the other, so rows
-- keyed the old way are never read again. They are left as they are.
ALTER TABLE media DROP CONSTRAINT media_status_check,
    ADD CONSTRAINT media_status_check CHECK (status IN ('pending', 'ready', 'failed', 'stale'));
ALTER TABLE media DROP CONSTRAINT media_settled_by_check,
    ADD CONSTRAINT media_settled_by_check CHECK (settled_by IN ('upload', 'callback', 'poll', 'send'));
