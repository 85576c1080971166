-- The content every item of a job has, stored once on the job instead of on each item.
-- A campaign's text is the same for every target unless its template has per-target fields;
-- stored on each item, it was written again with every version of the item's row (pending,
-- claimed, submitted, confirmed…) and in the WAL of each: about 1.8 bytes of WAL and 1.8 of
-- table per byte of text until TOAST takes over (docs/scale.md, "The text's share").
--
-- jobs.item_content: the job's common content (the template rendered with the request's
-- static variables; a media, tags or sync job's summary; else, in a snapshot, the text most
-- of its first items render), NULL when none applies.
-- items.content: NULL when the item's content is its job's item_content; an item rendered
-- differently (per-target fields) keeps its own. Readers take COALESCE(i.content,
-- j.item_content); items stored before this migration keep theirs as they are.
ALTER TABLE jobs ADD COLUMN item_content text;
ALTER TABLE items ALTER COLUMN content DROP NOT NULL;
