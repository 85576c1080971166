-- After a restore from a backup, items' versions count again from the backup: an event
-- written after the restore may have the (item_id, version) of one that was written, and
-- published as an outcome, between the backup and the restore. Outcomes' consumers dedupe on
-- `pacer-dedupe-key`; had it stayed `item_id:version`, they would drop the new event as a
-- repeat of the lost one.
--
-- item_events.restore_epoch: 0 for every event of a database never restored; `pacer
-- after-restore` sets the column's default to a new epoch (pacer_restore_epoch: the Unix
-- time it ran, in seconds) before it writes anything, so every event written from then on
-- carries it, and an outcome's key becomes `item_id:version:epoch`. An event republished from
-- before the restore keeps its epoch, so its key is the one consumers saw.
-- A constant default: no row is rewritten, and inserts cost what they did.
ALTER TABLE item_events ADD COLUMN restore_epoch bigint NOT NULL DEFAULT 0;

-- pacer_restore_epoch: db/schema/functions/pacer_restore_epoch.sql
