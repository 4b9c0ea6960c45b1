"""Authentication and TLS: the parts of security that read keys, files and certificates.

Authorization *decisions* are sans-IO and live in :mod:`magnetar.core.security.authorization`;
this package turns credentials (a JWT, ``user:password``, a client certificate) into a
role, and config values into keys and SSL contexts.
"""
