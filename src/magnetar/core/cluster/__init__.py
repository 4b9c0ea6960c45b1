"""Several brokers over one metadata store and shared storage: who owns a namespace bundle,
who answers a lookup, and who may acknowledge an append. Decisions only; the shell runs the
store calls and file operations they ask for. The protocol and why it is safe:
docs/cluster.md."""
