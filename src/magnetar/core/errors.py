"""Errors the broker reports to clients, carrying Pulsar's ``ServerError`` codes.

The numbers are wire facts (PulsarApi.proto ``ServerError``); core raises these and
the server turns them into ERROR / SEND_ERROR / lookup failures unchanged.
"""

from __future__ import annotations

from enum import IntEnum


class ServerError(IntEnum):
    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    TransactionCoordinatorNotFound = 20
    InvalidTxnStatus = 21
    NotAllowedError = 22
    TransactionConflict = 23
    TransactionNotFound = 24
    ProducerFenced = 25


class BrokerError(Exception):
    """A failure a client caused or must be told about; ``code`` goes on the wire."""

    code: ServerError = ServerError.UnknownError

    def __init__(self, message: str, code: ServerError | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class AuthorizationError(BrokerError):
    code = ServerError.AuthorizationError


class InvalidTopicName(BrokerError):
    code = ServerError.InvalidTopicName


class TopicNotFound(BrokerError):
    code = ServerError.TopicNotFound


class SubscriptionNotFound(BrokerError):
    code = ServerError.SubscriptionNotFound


class ConsumerBusy(BrokerError):
    code = ServerError.ConsumerBusy


class ProducerBusy(BrokerError):
    code = ServerError.ProducerBusy


class ProducerFenced(BrokerError):
    code = ServerError.ProducerFenced


class NotAllowed(BrokerError):
    code = ServerError.NotAllowedError


class LimitReached(NotAllowed):
    """A namespace-wide limit (Pulsar answers it with 412 on the admin API)."""


class ServiceNotReady(BrokerError):
    code = ServerError.ServiceNotReady


class MetadataError(BrokerError):
    code = ServerError.MetadataError


class PersistenceError(BrokerError):
    code = ServerError.PersistenceError


class ConsumerAssignError(BrokerError):
    code = ServerError.ConsumerAssignError


class IncompatibleSchema(BrokerError):
    code = ServerError.IncompatibleSchema


class InvalidSchemaData(IncompatibleSchema):
    """A schema whose definition is not one of its type (Pulsar's ``InvalidSchemaDataException``)."""


class TopicTerminated(BrokerError):
    code = ServerError.TopicTerminatedError
