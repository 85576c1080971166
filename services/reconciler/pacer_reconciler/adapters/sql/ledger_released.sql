DELETE FROM send_ledger WHERE idem_key = %(k)s AND item_id = %(i)s AND state = 'reserved'
