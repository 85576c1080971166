SELECT pacer_confirm(%(item_id)s, %(epoch)s, %(idem_key)s, %(receipt)s) AS moved
