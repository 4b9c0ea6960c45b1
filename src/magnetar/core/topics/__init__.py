"""Topics: the managed ledger a topic writes to, its producers, and the publish path."""
