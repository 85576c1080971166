-- The first step of `pacer after-restore`: events written from here on carry a new restore
-- epoch, and their outcomes' dedupe keys with it (pacer_restore_epoch).
SELECT pacer_restore_epoch()
