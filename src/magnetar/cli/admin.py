"""``magnetar admin``: pulsar-admin's groups and verbs over the admin REST API.

``magnetar admin [--admin-url URL] [--json] GROUP VERB ...``: tables by default, the
API's JSON with ``--json``; a failed call exits non-zero with the broker's reason on
one line of stderr.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import typer

from magnetar.cli.output import (
    fail,
    parse_duration_ms,
    parse_size_bytes,
    print_json,
    print_list,
    print_mapping,
    print_rows,
)
from magnetar.core.errors import InvalidTopicName
from magnetar.core.names import TopicName

if TYPE_CHECKING:
    import httpx

admin_app = typer.Typer(help="Manage tenants, namespaces, topics and subscriptions (like pulsar-admin).",
                        no_args_is_help=True)
clusters_app = typer.Typer(help="Clusters.", no_args_is_help=True)
tenants_app = typer.Typer(help="Tenants.", no_args_is_help=True)
namespaces_app = typer.Typer(help="Namespaces and their policies.", no_args_is_help=True)
topics_app = typer.Typer(help="Topics, partitions, subscriptions and messages.", no_args_is_help=True)
brokers_app = typer.Typer(help="Broker health and configuration.", no_args_is_help=True)
schemas_app = typer.Typer(help="Topic schemas: get, upload, delete, test compatibility.", no_args_is_help=True)
for _group, _name in ((clusters_app, "clusters"), (tenants_app, "tenants"), (namespaces_app, "namespaces"),
                      (topics_app, "topics"), (brokers_app, "brokers"), (schemas_app, "schemas")):
    admin_app.add_typer(_group, name=_name)

SUB_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
#: 307 answers followed per request (a bundle moving while it is asked about may redirect twice)
MAX_REDIRECTS = 3


@dataclass
class Admin:
    url: str
    json_output: bool
    #: ``Authorization`` header value (``Bearer <token>``), when the broker wants credentials
    authorization: str | None = None
    #: CA file for an ``https://`` admin URL (None: the system's)
    trust_certs: str | None = None

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
             missing_ok: bool = False) -> httpx.Response:
        kwargs: dict[str, Any] = {"params": params}
        headers: dict[str, str] = {}
        if body is not None:
            kwargs["content"] = json.dumps(body)
            headers["content-type"] = "application/json"
        if self.authorization:
            headers["authorization"] = self.authorization
        kwargs["headers"] = headers
        if self.trust_certs:
            kwargs["verify"] = ssl.create_default_context(cafile=self.trust_certs)
        import httpx
        url = self.url + path
        try:
            # a broker of a cluster answers 307 for a topic another broker owns; followed here,
            # with the credentials (pulsar-admin does the same; httpx would drop them)
            for _ in range(MAX_REDIRECTS + 1):
                response = httpx.request(method, url, timeout=30, **kwargs)
                if response.status_code != 307 or "location" not in response.headers:
                    break
                url, kwargs["params"] = response.headers["location"], None
        except httpx.HTTPError as exc:
            fail(f"cannot reach the admin API at {self.url}: {exc}")
        if response.status_code >= 400 and not (missing_ok and response.status_code == 404):
            fail(f"{_reason(response)} (HTTP {response.status_code})")
        return response

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        response = self.call("GET", path, params=params)
        return response.json() if response.content else None

    def show(self, value: Any, title: str = "value") -> None:
        if self.json_output:
            print_json(value)
        elif isinstance(value, list):
            print_list(title, value)
        elif isinstance(value, dict):
            print_mapping(value)
        else:
            typer.echo("null" if value is None else json.dumps(value))

    def done(self, message: str) -> None:
        if not self.json_output:
            typer.echo(message)


def _show(ctx: typer.Context, path: str, title: str = "value", params: dict[str, Any] | None = None) -> None:
    """Print what a GET of ``path`` answers."""
    admin = _admin_of(ctx)
    admin.show(admin.get(path, params=params), title)


def _act(ctx: typer.Context, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
         *, done: str) -> None:
    """Make a call that answers nothing to print; ``done`` says what was done."""
    admin = _admin_of(ctx)
    admin.call(method, path, body, params=params)
    admin.done(done)


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    if isinstance(body, dict) and "reason" in body:
        return str(body["reason"])
    return response.text.strip()


@admin_app.callback()
def _admin(ctx: typer.Context,
           admin_url: Annotated[str, typer.Option("--admin-url", envvar="MAGNETAR_ADMIN_URL",
                                                  help="The broker's HTTP address")] = "http://localhost:8080",
           json_output: Annotated[bool, typer.Option("--json", help="Print the API's JSON")] = False,
           auth_token: Annotated[str | None, typer.Option("--auth-token", envvar="MAGNETAR_AUTH_TOKEN",
                                                          help="a token (AuthenticationProviderToken)")] = None,
           tls_trust_certs: Annotated[str | None, typer.Option(
               "--tls-trust-certs", envvar="MAGNETAR_TLS_TRUST_CERTS",
               help="CA file for an https:// admin URL")] = None) -> None:
    authorization = f"Bearer {auth_token.strip()}" if auth_token else None
    ctx.obj = Admin(admin_url.rstrip("/"), json_output, authorization, tls_trust_certs)


def _admin_of(ctx: typer.Context) -> Admin:
    admin = ctx.obj
    if not isinstance(admin, Admin):
        admin = Admin("http://localhost:8080", False)
    return admin


def topic_path(topic: str) -> tuple[TopicName, str]:
    try:
        name = TopicName.parse(topic)
    except InvalidTopicName as exc:
        fail(exc.message)
    local = quote(name.local_name, safe="")
    return name, f"/admin/v2/{name.domain}/{name.tenant}/{name.namespace}/{local}"


def namespace_path(namespace: str) -> str:
    parts = namespace.split("/")
    if len(parts) != 2 or not all(parts):
        fail(f"invalid namespace {namespace!r}: expected <tenant>/<namespace>")
    return f"/admin/v2/namespaces/{quote(parts[0], safe='')}/{quote(parts[1], safe='')}"


def _csv(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


# -- clusters ---------------------------------------------------------------------------------
@clusters_app.command("list")
def clusters_list(ctx: typer.Context) -> None:
    """List clusters."""
    _show(ctx, "/admin/v2/clusters", title="cluster")


@clusters_app.command("get")
def clusters_get(ctx: typer.Context, cluster: str) -> None:
    """Show a cluster's configuration."""
    _show(ctx, f"/admin/v2/clusters/{quote(cluster, safe='')}")


def _cluster_data(url: str | None, broker_url: str | None) -> dict[str, str]:
    data = {"serviceUrl": url, "brokerServiceUrl": broker_url}
    return {k: v for k, v in data.items() if v}


@clusters_app.command("create")
def clusters_create(ctx: typer.Context, cluster: str,
                    url: Annotated[str | None, typer.Option("--url", help="HTTP service URL")] = None,
                    broker_url: Annotated[str | None, typer.Option("--broker-url")] = None) -> None:
    """Create a cluster."""
    _act(ctx, "PUT", f"/admin/v2/clusters/{quote(cluster, safe='')}", _cluster_data(url, broker_url),
         done=f"Created cluster {cluster}")


@clusters_app.command("update")
def clusters_update(ctx: typer.Context, cluster: str,
                    url: Annotated[str | None, typer.Option("--url")] = None,
                    broker_url: Annotated[str | None, typer.Option("--broker-url")] = None) -> None:
    """Update a cluster."""
    _act(ctx, "POST", f"/admin/v2/clusters/{quote(cluster, safe='')}", _cluster_data(url, broker_url),
         done=f"Updated cluster {cluster}")


@clusters_app.command("delete")
def clusters_delete(ctx: typer.Context, cluster: str) -> None:
    """Delete a cluster."""
    _act(ctx, "DELETE", f"/admin/v2/clusters/{quote(cluster, safe='')}", done=f"Deleted cluster {cluster}")


# -- tenants -------------------------------------------------------------------------------------
@tenants_app.command("list")
def tenants_list(ctx: typer.Context) -> None:
    """List tenants."""
    _show(ctx, "/admin/v2/tenants", title="tenant")


@tenants_app.command("get")
def tenants_get(ctx: typer.Context, tenant: str) -> None:
    """Show a tenant's admin roles and allowed clusters."""
    _show(ctx, f"/admin/v2/tenants/{quote(tenant, safe='')}")


RolesOption = Annotated[str | None, typer.Option("--admin-roles", "-r", help="Comma-separated roles")]
ClustersOption = Annotated[str | None, typer.Option("--allowed-clusters", "-c", help="Comma-separated clusters")]


@tenants_app.command("create")
def tenants_create(ctx: typer.Context, tenant: str, admin_roles: RolesOption = None,
                   allowed_clusters: ClustersOption = None) -> None:
    """Create a tenant (allowed in every cluster the broker knows unless -c is given)."""
    admin = _admin_of(ctx)
    clusters = _csv(allowed_clusters) or admin.get("/admin/v2/clusters")
    admin.call("PUT", f"/admin/v2/tenants/{quote(tenant, safe='')}",
               {"adminRoles": _csv(admin_roles), "allowedClusters": clusters})
    admin.done(f"Created tenant {tenant}")


@tenants_app.command("update")
def tenants_update(ctx: typer.Context, tenant: str, admin_roles: RolesOption = None,
                   allowed_clusters: ClustersOption = None) -> None:
    """Update a tenant."""
    admin = _admin_of(ctx)
    current = admin.get(f"/admin/v2/tenants/{quote(tenant, safe='')}")
    body = {"adminRoles": _csv(admin_roles) if admin_roles is not None else current["adminRoles"],
            "allowedClusters": _csv(allowed_clusters) if allowed_clusters is not None
            else current["allowedClusters"]}
    admin.call("POST", f"/admin/v2/tenants/{quote(tenant, safe='')}", body)
    admin.done(f"Updated tenant {tenant}")


ForceOption = Annotated[bool, typer.Option("--force", "-f", help="Also delete what it contains / is in use")]


@tenants_app.command("delete")
def tenants_delete(ctx: typer.Context, tenant: str, force: ForceOption = False) -> None:
    """Delete a tenant (refused while it has namespaces unless forced)."""
    _act(ctx, "DELETE", f"/admin/v2/tenants/{quote(tenant, safe='')}", params={"force": force},
         done=f"Deleted tenant {tenant}")


# -- namespaces -----------------------------------------------------------------------------------
@namespaces_app.command("list")
def namespaces_list(ctx: typer.Context, tenant: str) -> None:
    """List the namespaces of a tenant."""
    _show(ctx, f"/admin/v2/namespaces/{quote(tenant, safe='')}", title="namespace")


@namespaces_app.command("create")
def namespaces_create(ctx: typer.Context, namespace: str) -> None:
    """Create a namespace: TENANT/NAMESPACE."""
    _act(ctx, "PUT", namespace_path(namespace), done=f"Created namespace {namespace}")


@namespaces_app.command("delete")
def namespaces_delete(ctx: typer.Context, namespace: str, force: ForceOption = False) -> None:
    """Delete a namespace (refused while it has topics unless forced)."""
    _act(ctx, "DELETE", namespace_path(namespace), params={"force": force}, done=f"Deleted namespace {namespace}")


@namespaces_app.command("policies")
def namespaces_policies(ctx: typer.Context, namespace: str) -> None:
    """Show every policy of a namespace."""
    _show(ctx, namespace_path(namespace))


@namespaces_app.command("topics")
def namespaces_topics(ctx: typer.Context, namespace: str) -> None:
    """List the topics of a namespace."""
    _show(ctx, namespace_path(namespace) + "/topics", params={"mode": "ALL"}, title="topic")


def _set_policy(ctx: typer.Context, namespace: str, policy: str, value: Any) -> None:
    _act(ctx, "POST", f"{namespace_path(namespace)}/{policy}", value, done=f"Set {policy} on {namespace}")


#: (verb suffix, REST path) of the policies that also have get-/remove- verbs.
POLICY_VERBS = (
    ("deduplication", "deduplication"),
    ("retention", "retention"),
    ("message-ttl", "messageTTL"),
    ("delayed-delivery", "delayedDelivery"),
    ("max-producers-per-topic", "maxProducersPerTopic"),
    ("max-consumers-per-subscription", "maxConsumersPerSubscription"),
    ("max-unacked-messages-per-consumer", "maxUnackedMessagesPerConsumer"),
    ("max-unacked-messages-per-subscription", "maxUnackedMessagesPerSubscription"),
    ("auto-topic-creation", "autoTopicCreation"),
    ("subscription-types-enabled", "subscriptionTypesEnabled"),
    ("max-consumers-per-topic", "maxConsumersPerTopic"),
    ("max-subscriptions-per-topic", "maxSubscriptionsPerTopic"),
    ("max-topics-per-namespace", "maxTopicsPerNamespace"),
    ("publish-rate", "publishRate"),
    ("inactive-topic-policies", "inactiveTopicPolicies"),
    ("subscription-expiration-time", "subscriptionExpirationTime"),
)


def _add_policy_verbs(app: typer.Typer, verb: str, path: str, noun: str, base_of: Callable[[str], str],
                      *, applied: bool = False) -> None:
    """``get-<verb>`` and ``remove-<verb>`` of a namespace or topic policy; ``applied``
    gives ``get-`` Pulsar's ``--applied`` (the value that applies, from whichever level)."""
    def get_policy(ctx: typer.Context, name: str, effective: bool = False) -> None:
        admin = _admin_of(ctx)
        admin.show(admin.get(f"{base_of(name)}/{path}", params={"applied": "true"} if effective else None))

    def remove_policy(ctx: typer.Context, name: str) -> None:
        admin = _admin_of(ctx)
        admin.call("DELETE", f"{base_of(name)}/{path}")
        admin.done(f"Removed {path} from {name}")

    # this module's annotations are strings; these are built here, where noun and applied are known
    argument = Annotated[str, typer.Argument(metavar=noun.upper())]
    option = Annotated[bool, typer.Option("--applied", "-ap", hidden=not applied,
                                          help="the value that applies (topic, namespace or broker)")]
    get_policy.__annotations__ = {"ctx": typer.Context, "name": argument, "effective": option, "return": None}
    remove_policy.__annotations__ = {"ctx": typer.Context, "name": argument, "return": None}
    what = verb.replace("-", " ")
    get_policy.__doc__ = f"Show the {noun}'s {what} policy."
    remove_policy.__doc__ = f"Remove the {noun}'s {what} policy (the next level's applies)."
    app.command(f"get-{verb}")(get_policy)
    app.command(f"remove-{verb}")(remove_policy)


for _verb, _path in POLICY_VERBS:
    _add_policy_verbs(namespaces_app, _verb, _path, "namespace", namespace_path)


@namespaces_app.command("set-deduplication")
def set_deduplication(ctx: typer.Context, namespace: str,
                      enable: Annotated[bool, typer.Option("--enable/--disable", "-e/-d")] = True) -> None:
    """Enable or disable producer deduplication."""
    _set_policy(ctx, namespace, "deduplication", enable)


@namespaces_app.command("set-retention")
def set_retention(ctx: typer.Context, namespace: str,
                  size: Annotated[str, typer.Option("--size", "-s", help="e.g. 10M, 2G, -1 (infinite)")],
                  time_: Annotated[str, typer.Option("--time", "-t", help="e.g. 3h, 7d, -1 (infinite)")]) -> None:
    """Keep acknowledged messages for a time and/or size."""
    _set_policy(ctx, namespace, "retention", _retention_body(size, time_))


def _retention_body(size: str, time_: str) -> dict[str, int]:
    minutes = -1 if time_.strip() == "-1" else parse_duration_ms(time_, "m") // 60_000
    size_bytes = parse_size_bytes(size)
    megabytes = -1 if size_bytes < 0 else size_bytes // (1024 * 1024)
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": megabytes}


@namespaces_app.command("set-message-ttl")
def set_message_ttl(ctx: typer.Context, namespace: str,
                    ttl: Annotated[str, typer.Option("--messageTTL", "-ttl", help="e.g. 3600 or 1h")]) -> None:
    """Expire unacknowledged messages older than the TTL."""
    _set_policy(ctx, namespace, "messageTTL", parse_duration_ms(ttl) // 1000)


@namespaces_app.command("set-backlog-quota")
def set_backlog_quota(ctx: typer.Context, namespace: str,
                      policy: Annotated[str, typer.Option("--policy", "-p", help=(
                          "producer_request_hold | producer_exception | consumer_backlog_eviction"))],
                      limit: Annotated[str | None, typer.Option("--limit", "-l", help="size, e.g. 2G")] = None,
                      limit_time: Annotated[str | None, typer.Option("--limitTime", "-lt")] = None,
                      quota_type: Annotated[str, typer.Option("--type", "-t")] = "destination_storage") -> None:
    """Set a backlog quota (size-based destination_storage or age-based message_age)."""
    quota: dict[str, Any] = {"policy": policy}
    if limit is not None:
        quota["limitSize"] = parse_size_bytes(limit)
    if limit_time is not None:
        quota["limitTime"] = parse_duration_ms(limit_time) // 1000
    _act(ctx, "POST", f"{namespace_path(namespace)}/backlogQuota", quota, params={"backlogQuotaType": quota_type},
         done=f"Set backlog quota on {namespace}")


@namespaces_app.command("get-backlog-quotas")
def get_backlog_quotas(ctx: typer.Context, namespace: str) -> None:
    """Show the backlog quotas."""
    _show(ctx, f"{namespace_path(namespace)}/backlogQuotaMap")


@namespaces_app.command("remove-backlog-quota")
def remove_backlog_quota(ctx: typer.Context, namespace: str,
                         quota_type: Annotated[str, typer.Option("--type", "-t")] = "destination_storage") -> None:
    """Remove a backlog quota."""
    _act(ctx, "DELETE", f"{namespace_path(namespace)}/backlogQuota", params={"backlogQuotaType": quota_type},
         done=f"Removed backlog quota from {namespace}")


@namespaces_app.command("unload")
def namespaces_unload(ctx: typer.Context, namespace: str) -> None:
    """Unload every topic of the namespace: clients reconnect and the topics load again."""
    _act(ctx, "PUT", f"{namespace_path(namespace)}/unload", done=f"Unloaded namespace {namespace}")


@namespaces_app.command("clear-backlog")
def namespaces_clear_backlog(ctx: typer.Context, namespace: str,
                             subscription: Annotated[str | None, typer.Option("--sub", "-s")] = None) -> None:
    """Skip every message of every subscription (or of one) on every topic of the namespace."""
    admin = _admin_of(ctx)
    suffix = "" if subscription is None else f"/{subscription}"
    admin.call("POST", f"{namespace_path(namespace)}/clearBacklog{suffix}")
    admin.done(f"Cleared the backlog of {namespace}")


@namespaces_app.command("set-inactive-topic-policies")
def set_inactive_topic_policies(
        ctx: typer.Context, namespace: str,
        mode: Annotated[str, typer.Option("--delete-mode", "-m", help=(
            "delete_when_no_subscriptions | delete_when_subscriptions_caught_up"))],
        max_inactive: Annotated[str, typer.Option("--max-inactive-duration", "-t", help="e.g. 600 or 10m")],
        enable: Annotated[bool, typer.Option("--enable-delete-while-inactive/--disable-delete-while-inactive",
                                             "-e/-d")] = True) -> None:
    """When an unused topic of the namespace is deleted."""
    _set_policy(ctx, namespace, "inactiveTopicPolicies", {
        "inactiveTopicDeleteMode": mode, "maxInactiveDurationSeconds": parse_duration_ms(max_inactive) // 1000,
        "deleteWhileInactive": enable})


@namespaces_app.command("set-subscription-expiration-time")
def set_subscription_expiration_time(
        ctx: typer.Context, namespace: str,
        minutes: Annotated[int, typer.Option("--time", "-t", help="minutes; 0 keeps subscriptions")]) -> None:
    """Delete subscriptions without consumers for this long."""
    _set_policy(ctx, namespace, "subscriptionExpirationTime", minutes)


@namespaces_app.command("set-delayed-delivery")
def set_delayed_delivery(ctx: typer.Context, namespace: str,
                         enable: Annotated[bool, typer.Option("--enable/--disable", "-e/-d")] = True,
                         tick: Annotated[str, typer.Option("--time", "-t", help="tick time, e.g. 1s")] = "1s",
                         max_delay: Annotated[str, typer.Option("--maxDelay", "-md")] = "0") -> None:
    """Enable or disable delayed delivery and set its tick time."""
    _set_policy(ctx, namespace, "delayedDelivery", {
        "active": enable, "tickTime": parse_duration_ms(tick), "maxDeliveryDelayInMillis":
            parse_duration_ms(max_delay)})


def _add_limit_verb(verb: str, path: str, flag: str, short: str) -> None:
    def set_limit(ctx: typer.Context, namespace: str,
                  value: int = typer.Option(..., flag, short, help="0 means no limit")) -> None:  # noqa: B008
        _set_policy(ctx, namespace, path, value)

    set_limit.__doc__ = f"Set the {verb.replace('-', ' ')} limit."
    namespaces_app.command(f"set-{verb}")(set_limit)


for _verb, _path, _flag, _short in (
        ("max-producers-per-topic", "maxProducersPerTopic", "--max-producers-per-topic", "-p"),
        ("max-consumers-per-subscription", "maxConsumersPerSubscription", "--max-consumers-per-subscription",
         "-c"),
        ("max-unacked-messages-per-consumer", "maxUnackedMessagesPerConsumer", "--maxUnackedMessages", "-m"),
        ("max-unacked-messages-per-subscription", "maxUnackedMessagesPerSubscription", "--maxUnackedMessages",
         "-m"),
        ("max-consumers-per-topic", "maxConsumersPerTopic", "--max-consumers-per-topic", "-c"),
        ("max-subscriptions-per-topic", "maxSubscriptionsPerTopic", "--max-subscriptions-per-topic", "-m"),
        ("max-topics-per-namespace", "maxTopicsPerNamespace", "--max-topics-per-namespace", "-t")):
    _add_limit_verb(_verb, _path, _flag, _short)


@namespaces_app.command("set-publish-rate")
def namespaces_set_publish_rate(
        ctx: typer.Context, namespace: str,
        msg_rate: Annotated[int, typer.Option("--msg-publish-rate", "-m", help="-1: no limit")] = -1,
        byte_rate: Annotated[int, typer.Option("--byte-publish-rate", "-b", help="-1: no limit")] = -1) -> None:
    """Set the publish rate of each topic of the namespace (messages and bytes per second)."""
    _set_policy(ctx, namespace, "publishRate",
                {"publishThrottlingRateInMsg": msg_rate, "publishThrottlingRateInByte": byte_rate})


ActionsOption = Annotated[str, typer.Option("--actions", "-a", help="comma-separated: produce, consume, ...")]
RoleOption = Annotated[str, typer.Option("--role", "-r")]


def _actions(text: str) -> list[str]:
    return [a.strip() for a in text.split(",") if a.strip()]


@namespaces_app.command("grant-permission")
def namespaces_grant(ctx: typer.Context, namespace: str, role: RoleOption, actions: ActionsOption) -> None:
    """Grant a role actions on every topic of the namespace."""
    _act(ctx, "POST", f"{namespace_path(namespace)}/permissions/{quote(role, safe='')}", _actions(actions),
         done=f"Granted {actions} on {namespace} to {role}")


@namespaces_app.command("revoke-permission")
def namespaces_revoke(ctx: typer.Context, namespace: str, role: RoleOption) -> None:
    """Revoke a role's namespace permissions."""
    _act(ctx, "DELETE", f"{namespace_path(namespace)}/permissions/{quote(role, safe='')}",
         done=f"Revoked the permissions of {role} on {namespace}")


@namespaces_app.command("permissions")
def namespaces_permissions(ctx: typer.Context, namespace: str) -> None:
    """Show the roles and their actions on a namespace."""
    _show(ctx, f"{namespace_path(namespace)}/permissions")


@namespaces_app.command("set-auto-topic-creation")
def set_auto_topic_creation(ctx: typer.Context, namespace: str,
                            enable: Annotated[bool, typer.Option("--enable/--disable", "-e/-d")] = True,
                            topic_type: Annotated[str, typer.Option("--type", "-t")] = "non-partitioned",
                            partitions: Annotated[int | None, typer.Option("--num-partitions", "-n")] = None
                            ) -> None:
    """Override the broker's auto topic creation for this namespace."""
    body: dict[str, Any] = {"allowAutoTopicCreation": enable}
    if enable:
        body["topicType"] = topic_type
        if partitions is not None:
            body["defaultNumPartitions"] = partitions
    _set_policy(ctx, namespace, "autoTopicCreation", body)


@namespaces_app.command("set-subscription-types-enabled")
def set_subscription_types_enabled(ctx: typer.Context, namespace: str,
                                   types: Annotated[str, typer.Option("--types", "-t",
                                                                      help="e.g. Shared,Key_Shared")]) -> None:
    """Allow only these subscription types."""
    _set_policy(ctx, namespace, "subscriptionTypesEnabled", _csv(types))


# -- topics ------------------------------------------------------------------------------------------------
PartitionsOption = Annotated[int, typer.Option("--partitions", "-p", help="Number of partitions")]
SubOption = Annotated[str, typer.Option("--subscription", "-s", help="Subscription name")]


@topics_app.command("list")
def topics_list(ctx: typer.Context, namespace: str) -> None:
    """List the topics of a namespace (partitions included)."""
    admin = _admin_of(ctx)
    tenant, ns = namespace_path(namespace).rsplit("/", 2)[-2:]
    topics = admin.get(f"/admin/v2/persistent/{tenant}/{ns}") + admin.get(f"/admin/v2/non-persistent/{tenant}/{ns}")
    admin.show(sorted(topics), "topic")


@topics_app.command("list-partitioned-topics")
def topics_list_partitioned(ctx: typer.Context, namespace: str) -> None:
    """List the partitioned topics of a namespace."""
    admin = _admin_of(ctx)
    tenant, ns = namespace_path(namespace).rsplit("/", 2)[-2:]
    topics = admin.get(f"/admin/v2/persistent/{tenant}/{ns}/partitioned") + \
        admin.get(f"/admin/v2/non-persistent/{tenant}/{ns}/partitioned")
    admin.show(sorted(topics), "topic")


@topics_app.command("create")
def topics_create(ctx: typer.Context, topic: str) -> None:
    """Create a non-partitioned topic."""
    name, path = topic_path(topic)
    _act(ctx, "PUT", path, done=f"Created topic {name}")


@topics_app.command("create-partitioned-topic")
def topics_create_partitioned(ctx: typer.Context, topic: str, partitions: PartitionsOption) -> None:
    """Create a partitioned topic."""
    name, path = topic_path(topic)
    _act(ctx, "PUT", f"{path}/partitions", partitions,
         done=f"Created partitioned topic {name} with {partitions} partitions")


@topics_app.command("update-partitioned-topic")
def topics_update_partitioned(ctx: typer.Context, topic: str, partitions: PartitionsOption) -> None:
    """Increase the partitions of a partitioned topic."""
    name, path = topic_path(topic)
    _act(ctx, "POST", f"{path}/partitions", partitions, done=f"Updated {name} to {partitions} partitions")


@topics_app.command("get-partitioned-topic-metadata")
def topics_partitioned_metadata(ctx: typer.Context, topic: str) -> None:
    """Show the partition count of a topic (0 when not partitioned)."""
    _show(ctx, f"{topic_path(topic)[1]}/partitions")


@topics_app.command("delete")
def topics_delete(ctx: typer.Context, topic: str, force: ForceOption = False) -> None:
    """Delete a topic (refused while clients are connected unless forced)."""
    name, path = topic_path(topic)
    _act(ctx, "DELETE", path, params={"force": force}, done=f"Deleted topic {name}")


@topics_app.command("delete-partitioned-topic")
def topics_delete_partitioned(ctx: typer.Context, topic: str, force: ForceOption = False) -> None:
    """Delete a partitioned topic and all its partitions."""
    name, path = topic_path(topic)
    _act(ctx, "DELETE", f"{path}/partitions", params={"force": force}, done=f"Deleted partitioned topic {name}")


@topics_app.command("unload")
def topics_unload(ctx: typer.Context, topic: str) -> None:
    """Unload a topic: clients reconnect and it is loaded again."""
    _put_to_topic(ctx, topic, "unload", "Unloaded topic {name}")


def _put_to_topic(ctx: typer.Context, topic: str, action: str, message: str) -> None:
    name, path = topic_path(topic)
    _act(ctx, "PUT", f"{path}/{action}", done=message.format(name=name))


@topics_app.command("compact")
def topics_compact(ctx: typer.Context, topic: str) -> None:
    """Start compacting a topic: keep the latest message of each key (fails while one runs)."""
    _put_to_topic(ctx, topic, "compaction", "Topic compaction requested for {name}")


_COMPACTION_MESSAGES = {"NOT_RUN": "Compaction has not been run for {topic} since broker startup",
                        "RUNNING": "Compaction is currently running", "SUCCESS": "Compaction was a success"}


@topics_app.command("compaction-status")
def topics_compaction_status(ctx: typer.Context, topic: str,
                             wait_complete: Annotated[bool, typer.Option(
                                 "--wait-complete", "-w", help="Wait until the compaction ends")] = False) -> None:
    """Show the status of a topic's compaction (exit status 1 when it failed)."""
    admin = _admin_of(ctx)
    name, path = topic_path(topic)
    status = admin.get(f"{path}/compaction")
    while wait_complete and status["status"] == "RUNNING":
        time.sleep(0.2)
        status = admin.get(f"{path}/compaction")
    if admin.json_output:
        print_json(status)
    if status["status"] == "ERROR":
        fail(f"Error compacting: {status['lastError']}")
    admin.done(_COMPACTION_MESSAGES[status["status"]].format(topic=name))


@topics_app.command("terminate")
def topics_terminate(ctx: typer.Context, topic: str) -> None:
    """Terminate a topic: no more messages; prints the id of its last message."""
    admin = _admin_of(ctx)
    _, path = topic_path(topic)
    admin.show(admin.call("POST", f"{path}/terminate").json())


@topics_app.command("partitioned-terminate")
def topics_partitioned_terminate(ctx: typer.Context, topic: str) -> None:
    """Terminate every partition of a partitioned topic; prints each last message id."""
    admin = _admin_of(ctx)
    _, path = topic_path(topic)
    admin.show(admin.call("POST", f"{path}/terminate/partitions").json())


@topics_app.command("lookup")
def topics_lookup(ctx: typer.Context, topic: str) -> None:
    """Show the broker that serves a topic."""
    admin = _admin_of(ctx)
    name, _ = topic_path(topic)
    found = admin.get(f"/lookup/v2/topic/{name.domain}/{name.tenant}/{name.namespace}/"
                      f"{quote(name.local_name, safe='')}")
    admin.show(found if admin.json_output else found["brokerUrl"])


def _show_topic_stats(admin: Admin, stats: dict[str, Any], title: str) -> None:
    if admin.json_output:
        print_json(stats)
        return
    scalars = {k: v for k, v in stats.items() if not isinstance(v, dict | list)}
    print_mapping(scalars, title=title)
    if stats.get("publishers"):
        print_rows(stats["publishers"], ["producerName", "msgRateIn", "msgThroughputIn", "accessMode", "address"],
                   title="publishers")
    subs = [{"name": name, **sub, "consumers": len(sub["consumers"])}
            for name, sub in stats.get("subscriptions", {}).items()]
    if subs:
        print_rows(subs, ["name", "type", "msgBacklog", "unackedMessages", "msgRateOut", "msgOutCounter",
                          "consumers"], title="subscriptions")


@topics_app.command("stats")
def topics_stats(ctx: typer.Context, topic: str) -> None:
    """Show a topic's stats (rates, counters, publishers, subscriptions)."""
    admin = _admin_of(ctx)
    name, path = topic_path(topic)
    _show_topic_stats(admin, admin.get(f"{path}/stats"), str(name))


@topics_app.command("partitioned-stats")
def topics_partitioned_stats(ctx: typer.Context, topic: str,
                             per_partition: Annotated[bool, typer.Option("--per-partition")] = False) -> None:
    """Show a partitioned topic's aggregated stats (and each partition's with --per-partition)."""
    admin = _admin_of(ctx)
    name, path = topic_path(topic)
    stats = admin.get(f"{path}/partitioned-stats", params={"perPartition": per_partition})
    if admin.json_output:
        print_json(stats)
        return
    _show_topic_stats(admin, {k: v for k, v in stats.items() if k not in ("partitions", "metadata")},
                      f"{name} ({stats['metadata']['partitions']} partitions)")
    for partition, part in stats.get("partitions", {}).items():
        _show_topic_stats(admin, part, partition)


@topics_app.command("internal-stats")
def topics_internal_stats(ctx: typer.Context, topic: str) -> None:
    """Show a topic's storage: ledgers and cursors."""
    admin = _admin_of(ctx)
    name, path = topic_path(topic)
    stats = admin.get(f"{path}/internalStats")
    if admin.json_output:
        print_json(stats)
        return
    print_mapping({k: v for k, v in stats.items() if not isinstance(v, dict | list)}, title=str(name))
    print_rows(stats["ledgers"], ["ledgerId", "entries", "size"], title="ledgers")
    cursors = [{"name": cursor_name, **cursor} for cursor_name, cursor in stats["cursors"].items()]
    if cursors:
        print_rows(cursors, ["name", "markDeletePosition", "readPosition", "individuallyDeletedMessages",
                             "active"], title="cursors")


@topics_app.command("last-message-id")
def topics_last_message_id(ctx: typer.Context, topic: str) -> None:
    """Show the id of the last message."""
    _show(ctx, f"{topic_path(topic)[1]}/lastMessageId")


@topics_app.command("subscriptions")
def topics_subscriptions(ctx: typer.Context, topic: str) -> None:
    """List a topic's subscriptions."""
    _show(ctx, f"{topic_path(topic)[1]}/subscriptions", title="subscription")


def _message_id(text: str) -> dict[str, int]:
    if text == "latest":
        return {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1, "partitionIndex": -1}
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
    parts = text.split(":")
    try:
        ledger, entry = int(parts[0]), int(parts[1])
        partition = int(parts[2]) if len(parts) > 2 else -1
    except (ValueError, IndexError):
        raise typer.BadParameter(f"{text!r}: use latest, earliest or <ledgerId>:<entryId>") from None
    return {"ledgerId": ledger, "entryId": entry, "partitionIndex": partition}


@topics_app.command("create-subscription")
def topics_create_subscription(ctx: typer.Context, topic: str, subscription: SubOption,
                               message_id: Annotated[str, typer.Option("--messageId", "-m", help=(
                                   "latest, earliest or <ledgerId>:<entryId>"))] = "latest") -> None:
    """Create a subscription at a position."""
    name, path = topic_path(topic)
    _act(ctx, "PUT", f"{path}/subscription/{quote(subscription, safe='')}", _message_id(message_id),
         done=f"Created subscription {subscription} on {name}")


@topics_app.command("unsubscribe")
def topics_unsubscribe(ctx: typer.Context, topic: str, subscription: SubOption, force: ForceOption = False) -> None:
    """Delete a subscription."""
    name, path = topic_path(topic)
    _act(ctx, "DELETE", f"{path}/subscription/{quote(subscription, safe='')}", params={"force": force},
         done=f"Deleted subscription {subscription} on {name}")


@topics_app.command("skip")
def topics_skip(ctx: typer.Context, topic: str, subscription: SubOption,
                count: Annotated[int, typer.Option("--count", "-n", help="Messages to skip")]) -> None:
    """Skip the next N messages of a subscription's backlog."""
    name, path = topic_path(topic)
    _act(ctx, "POST", f"{path}/subscription/{quote(subscription, safe='')}/skip/{count}",
         done=f"Skipped {count} messages on {name} {subscription}")


@topics_app.command("skip-all")
def topics_skip_all(ctx: typer.Context, topic: str, subscription: SubOption) -> None:
    """Skip every message of a subscription's backlog."""
    name, path = topic_path(topic)
    _act(ctx, "POST", f"{path}/subscription/{quote(subscription, safe='')}/skip_all",
         done=f"Cleared the backlog of {subscription} on {name}")


@topics_app.command("clear-backlog")
def topics_clear_backlog(ctx: typer.Context, topic: str, subscription: SubOption) -> None:
    """Same as skip-all (pulsar-admin's other name for it)."""
    topics_skip_all(ctx, topic, subscription)


@topics_app.command("expire-messages")
def topics_expire_messages(ctx: typer.Context, topic: str, subscription: SubOption,
                           expire_time: Annotated[str, typer.Option("--expireTime", "-t", help="e.g. 60 or 1h")]
                           ) -> None:
    """Acknowledge messages older than the given age on a subscription."""
    admin = _admin_of(ctx)
    name, path = topic_path(topic)
    seconds = parse_duration_ms(expire_time) // 1000
    admin.call("POST", f"{path}/subscription/{quote(subscription, safe='')}/expireMessages/{seconds}")
    admin.done(f"Expired messages older than {seconds}s on {name} {subscription}")


@topics_app.command("expire-messages-all-subscriptions")
def topics_expire_all(ctx: typer.Context, topic: str,
                      expire_time: Annotated[str, typer.Option("--expireTime", "-t")]) -> None:
    """Acknowledge messages older than the given age on every subscription."""
    admin = _admin_of(ctx)
    name, path = topic_path(topic)
    seconds = parse_duration_ms(expire_time) // 1000
    admin.call("POST", f"{path}/all_subscription/expireMessages/{seconds}")
    admin.done(f"Expired messages older than {seconds}s on every subscription of {name}")


@topics_app.command("reset-cursor")
def topics_reset_cursor(ctx: typer.Context, topic: str, subscription: SubOption,
                        time_ago: Annotated[str | None, typer.Option("--time", "-t", help=(
                            "go back this far from now, e.g. 10m"))] = None,
                        message_id: Annotated[str | None, typer.Option("--messageId", "-m", help=(
                            "<ledgerId>:<entryId>, earliest or latest"))] = None) -> None:
    """Move a subscription back (or forward) in time or to a message id."""
    admin = _admin_of(ctx)
    name, path = topic_path(topic)
    base = f"{path}/subscription/{quote(subscription, safe='')}/resetcursor"
    if (time_ago is None) == (message_id is None):
        fail("give exactly one of --time and --messageId")
    if time_ago is not None:
        timestamp = int(time.time() * 1000) - parse_duration_ms(time_ago)
        admin.call("POST", f"{base}/{timestamp}")
    else:
        admin.call("POST", base, _message_id(message_id or "latest"))
    admin.done(f"Reset cursor of {subscription} on {name}")


def _decode_messages(response: httpx.Response) -> list[dict[str, Any]]:
    """One entry from the admin API as messages (a batch is split as pulsar-admin does)."""
    headers = response.headers
    entry_id = headers.get("X-Pulsar-Message-ID", "")
    common = {"publishTime": headers.get("X-Pulsar-publish-time"),
              "producerName": headers.get("X-Pulsar-producer-name")}
    properties = json.loads(headers.get("X-Pulsar-PROPERTY", "{}"))
    count = headers.get("X-Pulsar-num-batch-message")
    if count is None:
        return [{"messageId": entry_id, **common, "key": headers.get("X-Pulsar-partition-key"),
                 "properties": properties, **_payload(response.content)}]
    from magnetar.wire import pulsar_api_pb2 as pb
    from magnetar.wire.batch import iter_batch
    try:
        records = iter_batch(pb.MessageMetadata(num_messages_in_batch=int(count)), response.content)
    except Exception as exc:
        return [{"messageId": entry_id, **common, "error": f"cannot split batch: {exc}",
                 **_payload(response.content)}]
    return [{"messageId": f"{entry_id}:{index}", **common,
             "key": single.partition_key if single.HasField("partition_key") else None,
             "properties": {kv.key: kv.value for kv in single.properties}, **_payload(body)}
            for index, (single, body) in enumerate(records)]


def _payload(data: bytes) -> dict[str, Any]:
    try:
        return {"payload": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"payloadBase64": base64.b64encode(data).decode()}


def _show_messages(admin: Admin, messages: list[dict[str, Any]]) -> None:
    if admin.json_output:
        print_json(messages)
        return
    for message in messages:
        print_mapping({k: v for k, v in message.items() if v not in (None, {})},
                      title=f"Message ID: {message['messageId']}")


@topics_app.command("peek-messages")
def topics_peek_messages(ctx: typer.Context, topic: str, subscription: SubOption,
                         count: Annotated[int, typer.Option("--count", "-n")] = 1) -> None:
    """Show the next N unacknowledged messages of a subscription without consuming them."""
    admin = _admin_of(ctx)
    _, path = topic_path(topic)
    messages: list[dict[str, Any]] = []
    for position in range(1, count + 1):
        response = httpx_get_message(admin, f"{path}/subscription/{quote(subscription, safe='')}"
                                            f"/position/{position}", allow_missing=position > 1)
        if response is None:
            break
        messages.extend(_decode_messages(response))
    _show_messages(admin, messages)


def httpx_get_message(admin: Admin, path: str, allow_missing: bool = False) -> httpx.Response | None:
    import httpx
    try:
        response = httpx.get(admin.url + path, timeout=30)
    except httpx.HTTPError as exc:
        fail(f"cannot reach the admin API at {admin.url}: {exc}")
    if response.status_code == 404 and allow_missing:
        return None
    if response.status_code >= 400:
        fail(f"{_reason(response)} (HTTP {response.status_code})")
    return response


@topics_app.command("examine-message")
def topics_examine_message(ctx: typer.Context, topic: str,
                           initial_position: Annotated[str, typer.Option("--initialPosition", "-i")] = "latest",
                           position: Annotated[int, typer.Option("--messagePosition", "-m")] = 1) -> None:
    """Show the n-th message from the earliest or the latest."""
    admin = _admin_of(ctx)
    _, path = topic_path(topic)
    response = httpx_get_message(admin, f"{path}/examinemessage?initialPosition={quote(initial_position)}"
                                        f"&messagePosition={position}")
    assert response is not None
    _show_messages(admin, _decode_messages(response))


@topics_app.command("get-message-by-id")
def topics_get_message_by_id(ctx: typer.Context, topic: str,
                             ledger_id: Annotated[int, typer.Option("--ledgerId", "-l")],
                             entry_id: Annotated[int, typer.Option("--entryId", "-e")]) -> None:
    """Show the message at a ledger and entry id."""
    admin = _admin_of(ctx)
    _, path = topic_path(topic)
    response = httpx_get_message(admin, f"{path}/ledger/{ledger_id}/entry/{entry_id}")
    assert response is not None
    _show_messages(admin, _decode_messages(response))


# -- brokers -----------------------------------------------------------------------------------------------
@brokers_app.command("healthcheck")
def brokers_healthcheck(ctx: typer.Context) -> None:
    """Check that the broker answers."""
    admin = _admin_of(ctx)
    typer.echo(admin.call("GET", "/admin/v2/brokers/health").text)


@brokers_app.command("get-runtime-config")
def brokers_runtime_config(ctx: typer.Context) -> None:
    """Show every configuration value the broker runs with."""
    _show(ctx, "/admin/v2/brokers/configuration/runtime")


@brokers_app.command("shutdown")
def brokers_shutdown(ctx: typer.Context) -> None:
    """Stop the broker gracefully: it hands its bundles to the other brokers, then exits
    (one step of a rolling restart)."""
    _act(ctx, "POST", "/admin/v2/brokers/shutdown", done="The broker is handing its bundles over and stopping")


@brokers_app.command("list")
def brokers_list(ctx: typer.Context, cluster: Annotated[str, typer.Argument()] = "standalone") -> None:
    """List the active brokers of a cluster."""
    _show(ctx, f"/admin/v2/brokers/{quote(cluster, safe='')}", title="broker")


@topics_app.command("grant-permission")
def topics_grant(ctx: typer.Context, topic: str, role: RoleOption, actions: ActionsOption) -> None:
    """Grant a role actions on one topic."""
    name, path = topic_path(topic)
    _act(ctx, "POST", f"{path}/permissions/{quote(role, safe='')}", _actions(actions),
         done=f"Granted {actions} on {name} to {role}")


@topics_app.command("revoke-permission")
def topics_revoke(ctx: typer.Context, topic: str, role: RoleOption) -> None:
    """Revoke a role's permissions on one topic."""
    name, path = topic_path(topic)
    _act(ctx, "DELETE", f"{path}/permissions/{quote(role, safe='')}",
         done=f"Revoked the permissions of {role} on {name}")


@topics_app.command("permissions")
def topics_permissions(ctx: typer.Context, topic: str) -> None:
    """Show the roles and their actions on a topic (its namespace's included)."""
    admin = _admin_of(ctx)
    _, path = topic_path(topic)
    admin.show(admin.get(f"{path}/permissions"))


# -- schemas (pulsar-admin schemas ...) -----------------------------------------------------------
def schema_path(topic: str) -> tuple[TopicName, str]:
    """``/admin/v2/schemas/{tenant}/{namespace}/{topic}`` of a topic (a partition's is its parent's)."""
    name, _ = topic_path(topic)
    return name, f"/admin/v2/schemas/{name.tenant}/{name.namespace}/{quote(name.local_name, safe='')}"


FilenameOption = Annotated[Path, typer.Option("--filename", "-f", help=(
    'a JSON file {"type": "AVRO", "schema": "<definition>", "properties": {...}}'))]


def _schema_payload(filename: Path) -> Any:
    try:
        payload = json.loads(filename.read_text())
    except OSError as exc:
        fail(f"cannot read {filename}: {exc.strerror}")
    except ValueError as exc:
        fail(f"{filename} is not JSON: {exc}")
    if not isinstance(payload, dict):
        fail(f'{filename} must hold a JSON object {{"type": ..., "schema": ..., "properties": ...}}')
    return payload


@schemas_app.command("get")
def schemas_get(ctx: typer.Context, topic: str,
                version: Annotated[int | None, typer.Option("--version", "-v", help="a version number")] = None,
                all_versions: Annotated[bool, typer.Option("--all-version", "-a", help="every version")] = False
                ) -> None:
    """Show a topic's schema (the latest, one version, or all)."""
    admin = _admin_of(ctx)
    _, path = schema_path(topic)
    if all_versions:
        admin.show(admin.get(f"{path}/schemas").get("getSchemaResponses", []), "schema")
    elif version is not None:
        admin.show(admin.get(f"{path}/schema/{version}"))
    else:
        admin.show(admin.get(f"{path}/schema"))


@schemas_app.command("upload")
def schemas_upload(ctx: typer.Context, topic: str, filename: FilenameOption) -> None:
    """Upload a schema; it becomes a new version if compatible with the topic's."""
    admin = _admin_of(ctx)
    name, path = schema_path(topic)
    response = admin.call("POST", f"{path}/schema", _schema_payload(filename)).json()
    if admin.json_output:
        print_json(response)
    admin.done(f"Uploaded a schema to {name}: version {response['version']['version']}")


@schemas_app.command("delete")
def schemas_delete(ctx: typer.Context, topic: str,
                   force: Annotated[bool, typer.Option("--force", "-f", help="remove every version for good")]
                   = False) -> None:
    """Delete a topic's schema (a delete marker version; every version with --force)."""
    admin = _admin_of(ctx)
    name, path = schema_path(topic)
    admin.call("DELETE", f"{path}/schema", params={"force": str(force).lower()})
    admin.done(f"Deleted the schema of {name}")


@schemas_app.command("compatibility")
def schemas_compatibility(ctx: typer.Context, topic: str, filename: FilenameOption) -> None:
    """Test whether a schema is compatible with the topic's under its strategy."""
    admin = _admin_of(ctx)
    _, path = schema_path(topic)
    response = admin.call("POST", f"{path}/compatibility", _schema_payload(filename)).json()
    if admin.json_output:
        print_json(response)
        return
    verdict = "compatible" if response["isCompatibility"] else "NOT compatible"
    typer.echo(f"The schema is {verdict} (strategy {response['schemaCompatibilityStrategy']})")


@namespaces_app.command("set-schema-compatibility-strategy")
def set_schema_compatibility_strategy(
        ctx: typer.Context, namespace: str,
        strategy: Annotated[str, typer.Option("--compatibility", "-c", help=(
            "UNDEFINED, ALWAYS_INCOMPATIBLE, ALWAYS_COMPATIBLE, BACKWARD, FORWARD, FULL, BACKWARD_TRANSITIVE, "
            "FORWARD_TRANSITIVE, FULL_TRANSITIVE"))]) -> None:
    """Set the schema compatibility strategy of a namespace."""
    _act(ctx, "PUT", f"{namespace_path(namespace)}/schemaCompatibilityStrategy", strategy.upper(),
         done=f"Set the schema compatibility strategy of {namespace} to {strategy.upper()}")


@namespaces_app.command("get-schema-compatibility-strategy")
def get_schema_compatibility_strategy(ctx: typer.Context, namespace: str) -> None:
    """Show the schema compatibility strategy of a namespace."""
    _show(ctx, f"{namespace_path(namespace)}/schemaCompatibilityStrategy")


def _add_flag_verb(verb: str, path: str, doc: str) -> None:
    """A namespace flag set with ``--enable/--disable``, as pulsar-admin's."""
    def set_flag(ctx: typer.Context, namespace: str,
                 enable: Annotated[bool, typer.Option("--enable/--disable", "-e/-d")] = True) -> None:
        admin = _admin_of(ctx)
        admin.call("POST", f"{namespace_path(namespace)}/{path}", enable)
        admin.done(f"Set {path} of {namespace} to {str(enable).lower()}")

    set_flag.__doc__ = doc
    namespaces_app.command(verb)(set_flag)


_add_flag_verb("set-is-allow-auto-update-schema", "isAllowAutoUpdateSchema",
               "Allow (or forbid) producers to add new schema versions.")
_add_flag_verb("set-schema-validation-enforce", "schemaValidationEnforced",
               "Refuse (or accept) producers without a schema on topics that have one.")


# -- topic policies ----------------------------------------------------------------------------
#: (verb suffix, REST path under the topic) of the topic policies with get-/remove- verbs
TOPIC_POLICY_VERBS = (
    ("retention", "retention"),
    ("message-ttl", "messageTTL"),
    ("deduplication", "deduplicationEnabled"),
    ("max-producers", "maxProducers"),
    ("max-consumers", "maxConsumers"),
    ("max-consumers-per-subscription", "maxConsumersPerSubscription"),
    ("max-unacked-messages-on-consumer", "maxUnackedMessagesOnConsumer"),
    ("max-unacked-messages-on-subscription", "maxUnackedMessagesOnSubscription"),
    ("compaction-threshold", "compactionThreshold"),
    ("delayed-delivery", "delayedDelivery"),
    ("inactive-topic-policies", "inactiveTopicPolicies"),
    ("schema-compatibility-strategy", "schemaCompatibilityStrategy"),
)
#: (verb suffix, REST path, option) of the topic limits set with one integer
TOPIC_LIMIT_VERBS = (
    ("max-producers", "maxProducers", "--max-producers"),
    ("max-consumers", "maxConsumers", "--max-consumers"),
    ("max-consumers-per-subscription", "maxConsumersPerSubscription", "--max-consumers-per-subscription"),
    ("max-unacked-messages-on-consumer", "maxUnackedMessagesOnConsumer", "--max-unacked-messages"),
    ("max-unacked-messages-on-subscription", "maxUnackedMessagesOnSubscription", "--max-unacked-messages"),
)


def _set_topic_policy(ctx: typer.Context, topic: str, path: str, value: Any = None,
                      params: dict[str, Any] | None = None) -> None:
    admin = _admin_of(ctx)
    name, base = topic_path(topic)
    admin.call("POST", f"{base}/{path}", value, params=params)
    admin.done(f"Set {path} on {name}")


def _topic_base(topic: str) -> str:
    return topic_path(topic)[1]


def _add_topic_limit_verb(verb: str, path: str, option: str) -> None:
    def set_limit(ctx: typer.Context, topic: str, value: int) -> None:
        _set_topic_policy(ctx, topic, path, value)

    # this module's annotations are strings, and the option's name is known only here
    set_limit.__annotations__ = {"ctx": typer.Context, "topic": str, "value": Annotated[int, typer.Option(option)],
                                 "return": None}
    set_limit.__doc__ = f"Set the topic's {verb.replace('-', ' ')} (0: no limit)."
    topics_app.command(f"set-{verb}")(set_limit)


for _verb, _path in TOPIC_POLICY_VERBS:
    _add_policy_verbs(topics_app, _verb, _path, "topic", _topic_base, applied=True)
for _verb, _path, _option in TOPIC_LIMIT_VERBS:
    _add_topic_limit_verb(_verb, _path, _option)


@topics_app.command("set-retention")
def topics_set_retention(ctx: typer.Context, topic: str,
                         size: Annotated[str, typer.Option("--size", "-s", help="e.g. 10M, 2G, -1 (infinite)")],
                         time_: Annotated[str, typer.Option("--time", "-t", help="e.g. 3h, 7d, -1 (infinite)")]
                         ) -> None:
    """Keep the topic's acknowledged messages for a time and/or size."""
    _set_topic_policy(ctx, topic, "retention", _retention_body(size, time_))


@topics_app.command("set-message-ttl")
def topics_set_message_ttl(ctx: typer.Context, topic: str,
                           ttl: Annotated[str, typer.Option("--ttl", "-t", help="e.g. 3600 or 1h")]) -> None:
    """Expire the topic's unacknowledged messages older than the TTL."""
    _set_topic_policy(ctx, topic, "messageTTL", params={"messageTTL": parse_duration_ms(ttl) // 1000})


@topics_app.command("set-deduplication")
def topics_set_deduplication(ctx: typer.Context, topic: str,
                             enable: Annotated[bool, typer.Option("--enable/--disable", "-e/-d")] = True) -> None:
    """Enable or disable producer deduplication on the topic."""
    _set_topic_policy(ctx, topic, "deduplicationEnabled", enable)


@topics_app.command("set-compaction-threshold")
def topics_set_compaction_threshold(ctx: typer.Context, topic: str,
                                    threshold: Annotated[str, typer.Option("--threshold", "-t",
                                                                           help="backlog size, e.g. 100M")]) -> None:
    """Compact the topic once its backlog exceeds this size (0: never)."""
    _set_topic_policy(ctx, topic, "compactionThreshold", parse_size_bytes(threshold))
