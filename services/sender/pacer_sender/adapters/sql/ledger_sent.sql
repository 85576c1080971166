UPDATE send_ledger SET state = 'sent', receipt = %(receipt)s, sent_at = now()
WHERE idem_key = %(idem_key)s AND item_id = %(item_id)s
