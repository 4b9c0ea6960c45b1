"""``magnetar broker``: the standalone broker's process, as one broker of a cluster.

The same listeners, event loop and broker service as ``magnetar standalone``; the metadata
store is the one ``metadataStoreUrl`` names, and :class:`ClusterMembership` registers the
broker once its listeners are up, answers lookups by bundle ownership, and hands the
bundles over on SIGTERM.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from magnetar.core.broker import commands as broker_commands
from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.core.cluster.load_balancer_config import LoadBalancerConfig
from magnetar.security.broker_client import broker_client_credentials
from magnetar.server.cluster_membership import ClusterMembership, broker_id_of
from magnetar.server.ledger_lists import LedgerLists
from magnetar.server.load_manager import LoadManager
from magnetar.server.standalone import Standalone, run


class ClusterBroker(Standalone):
    kind = "broker"

    def __init__(self, config: BrokerConfig, data_dir: Path) -> None:
        if config.metadata_store_url is None:
            raise ConfigError("magnetar broker needs metadataStoreUrl (zk:host:port[/chroot]); "
                              "without one, run magnetar standalone")
        load_balancing = LoadBalancerConfig.from_properties(config.extra)
        credentials = broker_client_credentials(config)
        super().__init__(config, data_dir)
        if self.broker.metadata.get_cluster(config.clusterName) is None:
            self.broker.metadata.close()
            raise ConfigError(f"cluster '{config.clusterName}' is not in the metadata store {config.metadataStoreUrl}: "
                              f"run magnetar initialize-cluster-metadata --cluster {config.clusterName} "
                              f"--metadata-store {config.metadataStoreUrl} first (or set clusterName)")
        broker_id = broker_id_of(config.advertisedAddress, config.webServicePort)
        self.membership = ClusterMembership(self.broker, self.broker.metadata, broker_id,
                                            config.metadataStoreSessionTimeoutMillis,
                                            config.unloadDrainTimeoutMillis)
        self.broker.appends.may_acknowledge = self.membership.may_acknowledge
        lists = LedgerLists(self.broker.metadata, self.membership, self.broker.ledger_factory.data_dir,
                            self.broker.ledger_factory.open, self.broker.ledger_ids.next_id,
                            ids_at_hand=self.broker.ledger_ids.at_hand)
        self.broker.ledger_lists = lists
        self.broker.appends.ledger_may_acknowledge = \
            lambda ledger: lists.may_acknowledge(ledger, self.membership.lease.session_id)
        self.broker.cluster_handlers = self.membership.handlers(broker_commands.HANDLERS)
        self.broker.cluster = self.membership
        self.load_manager = LoadManager(self.membership, load_balancing, self.broker.metadata, credentials)
        if load_balancing.loadBalancerEnabled:
            self.membership.placement = self.load_manager
        self.membership.load_balancing = self.load_manager

    async def _joined(self) -> None:
        await self.membership.join(asyncio.get_running_loop())
        await self.load_manager.start()

    async def _leaving(self) -> None:
        await self.load_manager.stop()
        await self.membership.leave()


def run_broker(config: BrokerConfig, data_dir: Path) -> None:
    run(lambda: ClusterBroker(config, data_dir))
