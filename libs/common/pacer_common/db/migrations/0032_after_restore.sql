-- After Postgres is restored from a backup, the database knows nothing of what was sent
-- between the backup and the restore: an item it shows pending, claimed or waiting for a
-- retry may have been sent in that time. `pacer after-restore` (a person, with every service
-- stopped) puts each such item in doubt, with its idempotency key reserved, so that the
-- reconciler verifies it by lookup before anything can send it again:
--
--   pending (due), claimed, waiting_retry (due) → recovery_pending ('ItemInDoubt',
--   error_class in_doubt, restored: true); submitted items are put in doubt as well.
--
-- The verifier then confirms what the gateway found, and puts back to pending, key released,
-- what it proved not delivered.

INSERT INTO item_transitions (from_status, to_status) VALUES
    ('pending', 'recovery_pending'), ('claimed', 'recovery_pending'), ('waiting_retry', 'recovery_pending');

-- pacer_after_restore: db/schema/functions/pacer_after_restore.sql
