"""The schema registry's decisions (Pulsar's ``SchemaRegistryService`` and its
``SchemaCompatibilityCheck`` classes), sans-IO: storage of versions is the shell's.

- ``schema_data``: schema types, ``SchemaData``, compatibility strategies, KEY_VALUE parts.
- ``avro_resolution``: Avro's reader/writer resolution rules on fastavro-parsed schemas.
- ``compatibility``: a new schema against existing ones under a strategy, by type.
- ``versions``: which version a schema gets, soft deletes, producer and consumer rules.
"""
