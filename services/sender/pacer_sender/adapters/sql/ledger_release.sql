-- The send provably did not happen: free the key so a retry (or another item) may use it.
DELETE FROM send_ledger WHERE idem_key = %(idem_key)s AND item_id = %(item_id)s AND state = 'reserved'
