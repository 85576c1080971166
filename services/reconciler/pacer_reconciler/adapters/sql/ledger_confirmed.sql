UPDATE send_ledger SET state = 'sent', sent_at = now() WHERE idem_key = %(k)s AND item_id = %(i)s
