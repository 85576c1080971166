"""Pure domain shared by every service: ids, statuses, messages, events. No drivers."""
