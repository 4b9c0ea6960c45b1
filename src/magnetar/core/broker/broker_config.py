"""The broker's settings with Pulsar's key names and defaults, typed and checked.

Core reads its settings from here; reading them from a ``broker.conf`` file is the
business of :mod:`magnetar.config`. Keys Magnetar does not use are kept in ``extra``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

from magnetar.core.metadata.store_url import MetadataStoreUrlError, ZooKeeperUrl, parse_metadata_store_url


class ConfigError(ValueError):
    """A config value that cannot be used; the message names the key and the fix."""


@dataclass
class BrokerConfig:
    # network; an empty port (None) is not opened
    brokerServicePort: int | None = 6650
    webServicePort: int | None = 8080
    brokerServicePortTls: int | None = None
    webServicePortTls: int | None = None
    bindAddress: str = "0.0.0.0"
    advertisedAddress: str = "localhost"
    #: name:pulsar://host:port,name:pulsar+ssl://host:port,... (see core/broker/listeners.py)
    advertisedListeners: str = ""
    internalListenerName: str = ""
    clusterName: str = "standalone"
    #: the metadata store (Pulsar's keys and defaults): zk:host:port[,host:port...][/chroot], or
    #: the older bare host:port; empty keeps the standalone broker's SQLite store in its data dir
    metadataStoreUrl: str = ""
    #: the cluster-wide configuration store; empty: metadataStoreUrl
    configurationMetadataStoreUrl: str = ""
    metadataStoreSessionTimeoutMillis: int = 30000
    metadataStoreOperationTimeoutSeconds: int = 30
    #: a planned move of a bundle (unload, a broker stopping) first stops delivering to its
    #: topics' consumers and waits this long for them to acknowledge what they hold
    #: (Magnetar's; 0: close them at once, as Pulsar does)
    unloadDrainTimeoutMillis: int = 3000
    keepAliveIntervalSeconds: int = 30
    brokerShutdownTimeoutMs: int = 60000
    maxMessageSize: int = 5 * 1024 * 1024
    maxPendingPublishRequestsPerConnection: int = 1000
    #: topic loads whose ledger is being opened at once; more wait their turn (Pulsar's default)
    maxConcurrentTopicLoadRequest: int = 5000
    # topics
    allowAutoTopicCreation: bool = True
    allowAutoTopicCreationType: str = "non-partitioned"
    defaultNumPartitions: int = 1
    #: 0 means unlimited in Pulsar; Magnetar caps it so a typo cannot create a million partitions
    maxNumPartitionsPerPartitionedTopic: int = 1024
    allowAutoSubscriptionCreation: bool = True
    #: inactive topics (Pulsar's keys and defaults; standalone.conf also has them on): a topic
    #: with no producer or consumer, and no subscription (delete_when_no_subscriptions) or no
    #: backlog (delete_when_subscriptions_caught_up), for the max inactive duration is deleted
    brokerDeleteInactiveTopicsEnabled: bool = True
    brokerDeleteInactiveTopicsFrequencySeconds: int = 60
    brokerDeleteInactiveTopicsMode: str = "delete_when_no_subscriptions"
    #: None: brokerDeleteInactiveTopicsFrequencySeconds, as in Pulsar
    brokerDeleteInactiveTopicsMaxInactiveDurationSeconds: int | None = None
    #: subscriptions without consumers this long are deleted (0 = never); Magnetar accepts fractions
    subscriptionExpirationTimeMinutes: float = 0
    subscriptionExpiryCheckIntervalInMinutes: float = 5
    # data lifecycle: retention of consumed data, message TTL, backlog quotas, compaction, schemas
    defaultRetentionTimeInMinutes: int = 0
    defaultRetentionSizeInMB: int = 0
    retentionCheckIntervalInSeconds: int = 120
    ttlDurationDefaultInSeconds: int = 0
    #: an int in Pulsar; fractions are accepted so that tests can expire within a second
    messageExpiryCheckIntervalInMinutes: float = 5
    backlogQuotaCheckEnabled: bool = True
    backlogQuotaCheckIntervalInSeconds: int = 60
    backlogQuotaDefaultLimitBytes: int = -1
    backlogQuotaDefaultLimitSecond: int = -1
    backlogQuotaDefaultRetentionPolicy: str = "producer_request_hold"
    brokerServiceCompactionThresholdInBytes: int = 0
    #: fractions are accepted so that tests can check within a second
    brokerServiceCompactionMonitorIntervalInSeconds: float = 60
    topicCompactionRetainNullKey: bool = False
    schemaCompatibilityStrategy: str = "FULL"
    # dispatch
    maxUnackedMessagesPerConsumer: int = 50000
    maxUnackedMessagesPerSubscription: int = 200000
    acknowledgmentAtBatchIndexLevelEnabled: bool = True
    subscriptionKeySharedUseConsistentHashing: bool = True
    subscriptionKeySharedConsistentHashingReplicaPoints: int = 100
    subscriptionKeySharedUseClassicPersistentImplementation: bool = False
    keySharedUnblockingIntervalMs: int = 10
    keySharedLookAheadMsgInReplayThresholdPerConsumer: int = 2000
    keySharedLookAheadMsgInReplayThresholdPerSubscription: int = 20000
    # storage
    managedLedgerMaxEntriesPerLedger: int = 50000
    managedLedgerDefaultMarkDeleteRateLimit: float = 1.0
    journalSyncData: bool = True
    #: BookKeeper's name: synced data more than 256 MB behind a topic's end leaves the OS
    #: page cache (readers further behind read from the disk)
    journalRemoveFromPageCache: bool = True
    #: BookKeeper's names: appends are refused from this share of the data disk used...
    diskUsageThreshold: float = 0.95
    #: ...a warning is logged from this one, and usage is read every diskCheckInterval ms
    diskUsageWarnThreshold: float = 0.90
    diskCheckInterval: int = 10000
    #: Magnetar: an event-loop stall longer than this (ms) is logged with what ran in it,
    #: at most once per interval (0: none is logged; /metrics has the figures either way)
    loopStallThresholdMillis: int = 20
    #: BookKeeper's name: ledgers that may hold open files at once (the least recently used
    #: give theirs back); 0: a quarter of the process's descriptor limit
    openFileLimit: int = 0
    #: memory for the tail caches of all topics together, in MB (0: nothing is cached);
    #: unset, a fifth of the machine's memory (Pulsar: a fifth of the JVM's direct memory)
    managedLedgerCacheSizeMB: int | None = None
    # delayed delivery
    delayedDeliveryEnabled: bool = True
    delayedDeliveryTickTimeMillis: int = 1000
    isDelayedDeliveryDeliverAtTimeStrict: bool = False
    delayedDeliveryMaxDelayInMillis: int = 0
    delayedDeliveryTrackerFactoryClassName: str = (
        "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory"
    )
    delayedDeliveryMinIndexCountPerBucket: int = 50000
    delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds: int = 300
    delayedDeliveryMaxIndexesPerBucketSnapshotSegment: int = 5000
    delayedDeliveryMaxNumBuckets: int = -1
    delayedDeliverySharedIndexEnabled: bool = False
    # deduplication
    brokerDeduplicationEnabled: bool = False
    brokerDeduplicationEntriesInterval: int = 1000
    brokerDeduplicationSnapshotIntervalSeconds: int = 120
    brokerDeduplicationMaxNumberOfProducers: int = 10000
    brokerDeduplicationProducerInactivityTimeoutMinutes: int = 360
    # deduplication by a message property (Magnetar extension)
    brokerPropertyDeduplicationEnabled: bool = False
    brokerPropertyDeduplicationPropertyName: str = "__dedup_id"
    brokerPropertyDeduplicationWindowSeconds: int = 600
    brokerPropertyDeduplicationMaxIdsPerTopic: int = 100000
    # schemas (Pulsar's SchemaRegistryService settings; schemaCompatibilityStrategy is above)
    #: a new compatible schema may be added by a producer (namespace is_allow_auto_update_schema)
    isAllowAutoUpdateSchemaEnabled: bool = True
    #: producers without a schema are refused on topics that have one
    isSchemaValidationEnforced: bool = False
    # metrics
    exposeTopicLevelMetricsInPrometheus: bool = True
    exposeConsumerLevelMetricsInPrometheus: bool = False
    # admin HTTP: largest request body accepted (bytes); Pulsar's default -1 means
    # unlimited, Magnetar caps it since no admin body comes near 1 MiB. -1 disables.
    httpMaxRequestSize: int = 1024 * 1024
    # limits and back-pressure (0 = no limit, as in Pulsar)
    #: Magnetar: a persistent topic without producers or consumers this long is unloaded
    #: (cursors stored, files closed) and loads again on next use; 0 keeps topics loaded
    idleTopicUnloadSeconds: int = 300
    maxProducersPerTopic: int = 0
    maxConsumersPerTopic: int = 0
    maxConsumersPerSubscription: int = 0
    maxSubscriptionsPerTopic: int = 0
    maxTopicsPerNamespace: int = 0
    brokerMaxConnections: int = 0
    brokerMaxConnectionsPerIp: int = 0
    #: producers plus consumers one connection may hold (Magnetar; bounds one client's cost)
    maxProducersAndConsumersPerConnection: int = 10000
    #: -1: Magnetar's default of 512 MB (Pulsar's -1 is half the JVM's direct memory); 0: off
    maxMessagePublishBufferSizeInMB: int = -1
    # publish rate limits (0 = none): per topic by default, and for the whole broker
    maxPublishRatePerTopicInMessages: int = 0
    maxPublishRatePerTopicInBytes: int = 0
    brokerPublisherThrottlingMaxMessageRate: int = 0
    brokerPublisherThrottlingMaxByteRate: int = 0
    # dispatch rate limits (0 = none)
    dispatchThrottlingRatePerTopicInMsg: int = 0
    dispatchThrottlingRatePerTopicInByte: int = 0
    dispatchThrottlingRatePerSubscriptionInMsg: int = 0
    dispatchThrottlingRatePerSubscriptionInByte: int = 0
    pulsarChannelWriteBufferHighWaterMark: int = 64 * 1024
    pulsarChannelWriteBufferLowWaterMark: int = 32 * 1024
    #: Pulsar's default is false; Magnetar stops reading a connection that does not read
    #: its receipts, or such a producer could grow broker memory without bound
    pulsarChannelPauseReceivingRequestsIfUnwritable: bool = True
    # authentication (Pulsar's provider class names, see AUTHENTICATION_PROVIDERS)
    authenticationEnabled: bool = False
    authenticationProviders: str = ""
    authenticationRefreshCheckSeconds: int = 60
    anonymousUserRole: str = ""
    tokenSecretKey: str = ""
    tokenPublicKey: str = ""
    tokenAuthClaim: str = "sub"
    tokenAudienceClaim: str = ""
    tokenAudience: str = ""
    basicAuthConf: str = ""
    #: the credentials this broker presents to the other brokers of its cluster (Pulsar's
    #: client plugin class names, see BROKER_CLIENT_AUTHENTICATION_PLUGINS)
    brokerClientAuthenticationPlugin: str = ""
    brokerClientAuthenticationParameters: str = ""
    # authorization
    authorizationEnabled: bool = False
    superUserRoles: str = ""
    authenticateMetricsEndpoint: bool = False
    # TLS
    tlsCertificateFilePath: str = ""
    tlsKeyFilePath: str = ""
    tlsTrustCertsFilePath: str = ""
    tlsRequireTrustedClientCertOnConnect: bool = False
    tlsAllowInsecureConnection: bool = False
    tlsProtocols: str = ""
    tlsCiphers: str = ""
    tlsCertRefreshCheckDurationSec: int = 300
    extra: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def max_frame_size(self) -> int:
        """Pulsar's frame decoder accepts maxMessageSize plus 10 KiB of command overhead."""
        return self.maxMessageSize + 10240

    @property
    def publish_buffer_bytes(self) -> int:
        mb = self.maxMessagePublishBufferSizeInMB
        return 512 * 1024 * 1024 if mb < 0 else mb * 1024 * 1024

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}

    def with_overrides(self, values: dict[str, str]) -> BrokerConfig:
        """A copy with string values applied; unknown keys are returned in ``extra``."""
        known = {f.name: f for f in fields(self) if f.name != "extra"}
        updates: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        for key, raw in values.items():
            if key in known:
                updates[key] = _coerce(key, raw, known[key].type)
            else:
                unknown[key] = raw
        config = dataclasses.replace(self, **updates, extra={**self.extra, **unknown})
        config.validate()
        return config

    @property
    def authentication_methods(self) -> list[str]:
        """The auth method names (``token``, ``basic``, ``tls``) of the configured providers."""
        return [AUTHENTICATION_PROVIDERS[name] for name in _names(self.authenticationProviders)]

    @property
    def super_user_roles(self) -> frozenset[str]:
        return frozenset(_names(self.superUserRoles))

    @property
    def tls_protocols(self) -> list[str]:
        return _names(self.tlsProtocols)

    @property
    def metadata_store_url(self) -> ZooKeeperUrl | None:
        """Where the metadata store is, None for the standalone broker's SQLite store."""
        return parse_metadata_store_url(self.metadataStoreUrl) if self.metadataStoreUrl else None

    @property
    def configuration_metadata_store_url(self) -> ZooKeeperUrl | None:
        """The configuration store: configurationMetadataStoreUrl, else the metadata store."""
        if self.configurationMetadataStoreUrl:
            return parse_metadata_store_url(self.configurationMetadataStoreUrl, key="configurationMetadataStoreUrl")
        return self.metadata_store_url

    def validate(self) -> None:
        for key in ("brokerServicePort", "webServicePort", "brokerServicePortTls", "webServicePortTls"):
            port = getattr(self, key)
            if port is not None and not 0 <= port <= 65535:
                raise ConfigError(f"{key}={port} is not a TCP port (0..65535)")
        if self.brokerServicePort is None and self.brokerServicePortTls is None:
            raise ConfigError("brokerServicePort and brokerServicePortTls are both empty: set one of them")
        if self.webServicePort is None and self.webServicePortTls is None:
            raise ConfigError("webServicePort and webServicePortTls are both empty: set one of them")
        self._validate_security()
        if self.allowAutoTopicCreationType not in ("non-partitioned", "partitioned"):
            raise ConfigError(
                f"allowAutoTopicCreationType={self.allowAutoTopicCreationType!r}: "
                "use 'non-partitioned' or 'partitioned'"
            )
        if self.pulsarChannelWriteBufferLowWaterMark > self.pulsarChannelWriteBufferHighWaterMark:
            raise ConfigError(
                f"pulsarChannelWriteBufferLowWaterMark={self.pulsarChannelWriteBufferLowWaterMark} is above "
                f"pulsarChannelWriteBufferHighWaterMark={self.pulsarChannelWriteBufferHighWaterMark}"
            )
        if not 0 < self.diskUsageWarnThreshold <= self.diskUsageThreshold <= 1:
            raise ConfigError(
                f"diskUsageWarnThreshold={self.diskUsageWarnThreshold} and diskUsageThreshold="
                f"{self.diskUsageThreshold}: need 0 < diskUsageWarnThreshold <= diskUsageThreshold <= 1"
            )
        self._validate_lifecycle()
        self._validate_metadata_store()
        positive = ("maxMessageSize", "pulsarChannelWriteBufferHighWaterMark", "diskCheckInterval",
                    "defaultNumPartitions", "managedLedgerMaxEntriesPerLedger",
                    "keepAliveIntervalSeconds", "retentionCheckIntervalInSeconds",
                    "messageExpiryCheckIntervalInMinutes", "brokerDeleteInactiveTopicsFrequencySeconds",
                    "brokerServiceCompactionMonitorIntervalInSeconds", "maxConcurrentTopicLoadRequest")
        for key in positive:
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key}={getattr(self, key)} must be greater than 0")
        for key in ("maxUnackedMessagesPerConsumer", "maxUnackedMessagesPerSubscription",
                    "delayedDeliveryMaxDelayInMillis", "brokerShutdownTimeoutMs", "unloadDrainTimeoutMillis",
                    "maxProducersPerTopic", "maxConsumersPerTopic", "maxConsumersPerSubscription",
                    "maxSubscriptionsPerTopic", "maxTopicsPerNamespace", "brokerMaxConnections",
                    "brokerMaxConnectionsPerIp", "maxProducersAndConsumersPerConnection",
                    "maxPendingPublishRequestsPerConnection", "pulsarChannelWriteBufferLowWaterMark",
                    "idleTopicUnloadSeconds", "openFileLimit", "loopStallThresholdMillis",
                    "maxPublishRatePerTopicInMessages",
                    "maxPublishRatePerTopicInBytes", "brokerPublisherThrottlingMaxMessageRate",
                    "brokerPublisherThrottlingMaxByteRate", "tlsCertRefreshCheckDurationSec",
                    "dispatchThrottlingRatePerTopicInMsg", "dispatchThrottlingRatePerTopicInByte",
                    "dispatchThrottlingRatePerSubscriptionInMsg", "dispatchThrottlingRatePerSubscriptionInByte",
                    "ttlDurationDefaultInSeconds", "brokerServiceCompactionThresholdInBytes"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}={getattr(self, key)} must not be negative")
        if self.managedLedgerCacheSizeMB is not None and self.managedLedgerCacheSizeMB < 0:
            raise ConfigError(f"managedLedgerCacheSizeMB={self.managedLedgerCacheSizeMB} must not be negative")

    def _validate_metadata_store(self) -> None:
        try:
            self.metadata_store_url  # noqa: B018 - parsed to check it
            if self.configurationMetadataStoreUrl and not self.metadataStoreUrl:
                raise MetadataStoreUrlError("configurationMetadataStoreUrl needs metadataStoreUrl: a broker "
                                            "keeps its own metadata in the same kind of store")
            self.configuration_metadata_store_url  # noqa: B018
        except MetadataStoreUrlError as exc:
            raise ConfigError(str(exc)) from None
        for key in ("metadataStoreSessionTimeoutMillis", "metadataStoreOperationTimeoutSeconds"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key}={getattr(self, key)} must be greater than 0")

    def _validate_lifecycle(self) -> None:
        for key in ("defaultRetentionTimeInMinutes", "defaultRetentionSizeInMB", "backlogQuotaDefaultLimitBytes",
                    "backlogQuotaDefaultLimitSecond"):
            if getattr(self, key) < -1:
                raise ConfigError(f"{key}={getattr(self, key)} must be -1 (no limit) or more")
        choices = {"backlogQuotaDefaultRetentionPolicy": LIFECYCLE_CHOICES["backlog"],
                   "brokerDeleteInactiveTopicsMode": LIFECYCLE_CHOICES["inactive"],
                   "schemaCompatibilityStrategy": LIFECYCLE_CHOICES["schema"]}
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise ConfigError(f"{key}={getattr(self, key)!r}: use one of " + ", ".join(allowed))
        for key in ("brokerDeleteInactiveTopicsFrequencySeconds", "backlogQuotaCheckIntervalInSeconds",
                    "subscriptionExpiryCheckIntervalInMinutes"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key}={getattr(self, key)} must be greater than 0")
        duration = self.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds
        if duration is not None and duration < 0:
            raise ConfigError(f"brokerDeleteInactiveTopicsMaxInactiveDurationSeconds={duration} must not be negative")
        if self.subscriptionExpirationTimeMinutes < 0:
            raise ConfigError(f"subscriptionExpirationTimeMinutes={self.subscriptionExpirationTimeMinutes} "
                              "must not be negative (0 keeps subscriptions)")

    def _validate_security(self) -> None:
        unknown = [name for name in _names(self.authenticationProviders) if name not in AUTHENTICATION_PROVIDERS]
        if unknown:
            raise ConfigError(f"authenticationProviders: unknown provider {unknown[0]!r}; supported: "
                              + ", ".join(AUTHENTICATION_PROVIDERS))
        methods = self.authentication_methods
        if self.authenticationEnabled and not methods:
            raise ConfigError("authenticationEnabled=true needs authenticationProviders (e.g. "
                              "org.apache.pulsar.broker.authentication.AuthenticationProviderToken)")
        if self.authorizationEnabled and not self.authenticationEnabled:
            raise ConfigError("authorizationEnabled=true needs authenticationEnabled=true: "
                              "permissions are granted to authenticated roles")
        if self.authenticationEnabled and "token" in methods and not (self.tokenSecretKey or self.tokenPublicKey):
            raise ConfigError("AuthenticationProviderToken needs tokenSecretKey or tokenPublicKey")
        if self.tokenSecretKey and self.tokenPublicKey:
            raise ConfigError("set only one of tokenSecretKey (HMAC) and tokenPublicKey (RSA/EC)")
        if self.tokenAudienceClaim and not self.tokenAudience:
            raise ConfigError(f"tokenAudienceClaim={self.tokenAudienceClaim!r} needs tokenAudience, "
                              "the audience that stands for this broker")
        if self.authenticationEnabled and "basic" in methods and not self.basicAuthConf:
            raise ConfigError("AuthenticationProviderBasic needs basicAuthConf (an htpasswd file or data: URL)")
        plugin = self.brokerClientAuthenticationPlugin
        if plugin and plugin not in BROKER_CLIENT_AUTHENTICATION_PLUGINS:
            raise ConfigError(f"brokerClientAuthenticationPlugin: unknown plugin {plugin!r}; supported: "
                              + ", ".join(BROKER_CLIENT_AUTHENTICATION_PLUGINS))
        if plugin and not self.brokerClientAuthenticationParameters:
            raise ConfigError(f"brokerClientAuthenticationPlugin={plugin} needs brokerClientAuthenticationParameters "
                              "(the broker's own credentials)")
        if self.authenticationRefreshCheckSeconds <= 0:
            raise ConfigError(f"authenticationRefreshCheckSeconds={self.authenticationRefreshCheckSeconds} "
                              "must be greater than 0")
        tls_ports = self.brokerServicePortTls is not None or self.webServicePortTls is not None
        if tls_ports and not (self.tlsCertificateFilePath and self.tlsKeyFilePath):
            raise ConfigError("brokerServicePortTls/webServicePortTls need tlsCertificateFilePath and tlsKeyFilePath")
        bad = [p for p in self.tls_protocols if p not in TLS_PROTOCOLS]
        if bad:
            raise ConfigError(f"tlsProtocols: unknown protocol {bad[0]!r}; use " + ", ".join(TLS_PROTOCOLS))
        if self.tlsRequireTrustedClientCertOnConnect and not self.tlsTrustCertsFilePath:
            raise ConfigError("tlsRequireTrustedClientCertOnConnect=true needs tlsTrustCertsFilePath, "
                              "the CA that signs client certificates")


#: Pulsar's authentication provider classes Magnetar implements -> their auth method name
AUTHENTICATION_PROVIDERS = {
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": "token",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": "basic",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls": "tls",
}
#: Pulsar's client authentication classes a broker may present to the others -> their auth method name
BROKER_CLIENT_AUTHENTICATION_PLUGINS = {
    "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "org.apache.pulsar.client.impl.auth.AuthenticationBasic": "basic",
}
#: keys whose values are secrets (a data: URL holds the key itself): masked when shown
SENSITIVE_KEYS = frozenset({"tokenSecretKey", "basicAuthConf", "brokerClientAuthenticationParameters"})
TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
#: the values Pulsar's enums allow for the data-lifecycle settings
LIFECYCLE_CHOICES = {
    "backlog": ("producer_request_hold", "producer_exception", "consumer_backlog_eviction"),
    "inactive": ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"),
    "schema": ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE",
               "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"),
}


def _names(text: str) -> list[str]:
    """A comma-separated list as Pulsar's config reads it: blanks dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _coerce(key: str, raw: str, kind: Any) -> Any:
    text = raw.strip()
    kind_name = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    if kind_name == "int | None":
        if not text:
            return None
        kind_name = "int"
    try:
        if kind_name == "bool":
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ValueError
            return lowered == "true"
        if kind_name == "int":
            return int(text)
        if kind_name == "float":
            return float(text)
    except ValueError:
        raise ConfigError(f"{key}={raw!r}: expected {kind_name}") from None
    return text
