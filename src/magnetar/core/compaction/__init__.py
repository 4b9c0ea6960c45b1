"""Topic compaction: the compactor's algorithm and a topic's compacted view."""
