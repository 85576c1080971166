-- Whether this item was sent back once already to upload its media again (a send of it was
-- refused, pacer_sender.domain.media.after_media_refusal): its events say so, durably, through
-- restarts and takeovers. Read only when a media send is refused.
SELECT EXISTS (SELECT 1 FROM item_events
               WHERE item_id = %(item)s::uuid AND type = 'ItemRetryScheduled'
                 AND payload ->> 'error_class' = 'media_refused') AS sent_back
