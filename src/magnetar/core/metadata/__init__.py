"""What the broker needs of a metadata store (Pulsar's ``pulsar-metadata`` and the typed
``PulsarResources`` over it): the records, the errors, the metadata store URL and, in
:mod:`magnetar.core.metadata.interfaces`, one Protocol per concept. Storage implements
them: SQLite for the standalone broker, ZooKeeper for a cluster.
"""
