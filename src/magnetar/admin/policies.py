"""Namespace policies as the admin API stores and shows them (the model is core's ``Policies``).

Policies are stored in the metadata store as the JSON Pulsar's ``Policies`` class
serializes to (``deduplicationEnabled``, ``retention_policies``,
``message_ttl_in_seconds``, ``delayed_delivery_policies``, ``autoTopicCreationOverride``,
``subscription_types_enabled``, ...), only the fields that were set; reading them back
fills in Pulsar's defaults. Value types are strict: a string where a number belongs
is refused with 400 rather than guessed at.
"""

from __future__ import annotations

import copy
from typing import Any

from magnetar.core.policies import Policies


def policies_to_store(policies: Policies | None) -> dict[str, Any]:
    if policies is None:
        return {}
    stored = policies.model_dump(exclude_none=True, exclude={"deleted"})
    if "subscription_types_enabled" in stored:
        stored["subscription_types_enabled"] = sorted(set(stored["subscription_types_enabled"]))
    return stored


#: ``Policies`` as Pulsar serializes a fresh namespace (null fields are omitted).
DEFAULT_POLICIES: dict[str, Any] = {
    "auth_policies": {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}},
    "replication_clusters": [],
    "bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
    "backlog_quota_map": {},
    "clusterDispatchRate": {},
    "topicDispatchRate": {},
    "subscriptionDispatchRate": {},
    "replicatorDispatchRate": {},
    "clusterSubscribeRate": {},
    "publishMaxMessageRate": {},
    "latency_stats_sample_rate": {},
    "deleted": False,
    "encryption_required": False,
    "subscription_auth_mode": "None",
    "offload_threshold": -1,
    "schema_compatibility_strategy": "UNDEFINED",
    "schema_validation_enforced": False,
    "subscription_types_enabled": [],
    "properties": {},
}


def full_policies(stored: dict[str, Any], cluster: str, allow_auto_update_schema: bool = True) -> dict[str, Any]:
    """Stored policies over Pulsar's defaults, as ``GET /namespaces/{tenant}/{namespace}``;
    an unset ``is_allow_auto_update_schema`` shows the broker's value, as Pulsar does."""
    policies = copy.deepcopy(DEFAULT_POLICIES)
    policies["replication_clusters"] = [cluster]
    policies["is_allow_auto_update_schema"] = allow_auto_update_schema
    policies.update(copy.deepcopy(stored))
    return policies
