-- A guid's upload of a media serves its later items for PACER_SENDER_MEDIA_REUSE_S; after it
-- the media is uploaded again under a new idempotency key (media:<guid>:<hash>:<generation>),
-- because the gateway forgets temporary media (three days in WeCom).
ALTER TABLE media ADD COLUMN generation integer NOT NULL DEFAULT 0 CHECK (generation >= 0);
