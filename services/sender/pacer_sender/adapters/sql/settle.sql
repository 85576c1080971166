SELECT pacer_settle(%(item_id)s, %(epoch)s, %(idem_key)s, %(to)s::item_status, %(type)s, %(error_class)s,
                    %(error)s, %(next_attempt_at)s, %(release)s, %(hold_guid)s, %(refund)s) AS moved
