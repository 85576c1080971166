-- One time partition made (or skipped, with why); a transaction of its own.
SELECT partition, action, detail FROM pacer_create_partition(%(parent)s, %(starts)s, %(ends)s)
