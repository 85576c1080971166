-- A pending item the sender cannot send because of what it holds (a value the database or
-- the gateway client refuses, or a programming error that recurs on every attempt) is
-- failed with a reason before it is ever claimed: pending → failed. Nothing was sent, so
-- no verification is needed; an item already submitted is never moved this way.
INSERT INTO item_transitions (from_status, to_status) VALUES ('pending', 'failed');
