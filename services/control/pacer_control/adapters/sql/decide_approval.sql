SELECT outcome, message, status FROM pacer_decide_approval(%(job)s::uuid, %(approve)s, %(actor)s, %(reason)s)
