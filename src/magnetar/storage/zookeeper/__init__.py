"""The metadata store on ZooKeeper, through kazoo, in Pulsar's layout (:mod:`.paths`).

- ``session``  the kazoo client: session state, operation timeouts, error translation,
               and the cache of reads that ZooKeeper's watches keep current.
- ``records``  the records by concept, each a view of the one session.
- ``store``    :class:`ZooKeeperMetadataStore`, all of them together.
"""
