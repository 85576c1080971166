-- Count each send (a change of last_send_at, made by pacer_begin_send) in its windows.
CREATE OR REPLACE TRIGGER guid_send_windows BEFORE UPDATE OF last_send_at ON guid_leases
FOR EACH ROW EXECUTE FUNCTION pacer_count_send_windows();
