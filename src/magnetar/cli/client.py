"""``magnetar client produce|consume``: like ``pulsar-client``, on the official Python client.

The client library is imported when a command runs, so the rest of the CLI works
without it.
"""

from __future__ import annotations

import datetime
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from magnetar.cli.output import fail, parse_duration_ms

if TYPE_CHECKING:
    import pulsar

client_app = typer.Typer(help="Produce and consume messages (like pulsar-client).", no_args_is_help=True)

ServiceUrl = Annotated[str, typer.Option("--url", "--service-url", "-u", envvar="MAGNETAR_SERVICE_URL",
                                         help="pulsar:// or http:// service URL")]
DEFAULT_SERVICE_URL = "pulsar://localhost:6650"
SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


def pulsar_module() -> Any:
    try:
        import pulsar
    except ImportError:
        fail("the official Pulsar client is needed: pip install pulsar-client")
    return pulsar


def open_client(service_url: str) -> pulsar.Client:
    module = pulsar_module()
    try:
        return module.Client(service_url, operation_timeout_seconds=30,
                             logger=module.ConsoleLogger(module.LoggerLevel.Error))
    except Exception as exc:
        fail(f"cannot create a client for {service_url}: {exc}")


def consumer_type(name: str) -> Any:
    if name not in SUBSCRIPTION_TYPES:
        raise typer.BadParameter(f"{name!r}: use one of {', '.join(SUBSCRIPTION_TYPES)}")
    module = pulsar_module()
    return getattr(module.ConsumerType, name.replace("_", ""))


def message_id_text(message_id: Any) -> str:
    return f"{message_id.ledger_id()}:{message_id.entry_id()}:{message_id.partition()}:{message_id.batch_index()}"


def _properties(items: list[str] | None) -> dict[str, str]:
    properties: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r}: properties are key=value")
        properties[key] = value
    return properties


@client_app.command("produce")
def produce(topic: str,
            messages: Annotated[list[str], typer.Option("--messages", "-m", help="Message body; repeat for more")],
            num_produce: Annotated[int, typer.Option("--num-produce", "-n", help="Times to send each message")] = 1,
            key: Annotated[str | None, typer.Option("--key", "-k", help="Partition key")] = None,
            properties: Annotated[list[str] | None, typer.Option("--properties", "-p", help="key=value")] = None,
            deliver_after: Annotated[str | None, typer.Option("--deliver-after", help="e.g. 10s, 500ms")] = None,
            deliver_at: Annotated[int | None, typer.Option("--deliver-at", help="epoch ms")] = None,
            service_url: ServiceUrl = DEFAULT_SERVICE_URL,
            json_output: Annotated[bool, typer.Option("--json", help="Print the message ids as JSON")] = False,
            ) -> None:
    """Send messages to a topic."""
    if num_produce < 1:
        raise typer.BadParameter("--num-produce must be at least 1")
    props = _properties(properties)
    delay = datetime.timedelta(milliseconds=parse_duration_ms(deliver_after)) if deliver_after else None
    client = open_client(service_url)
    sent: list[str] = []
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for _ in range(num_produce):
            for body in messages:
                kwargs: dict[str, Any] = {"properties": props}
                if key is not None:
                    kwargs["partition_key"] = key
                if delay is not None:
                    kwargs["deliver_after"] = delay
                if deliver_at is not None:
                    kwargs["deliver_at"] = deliver_at
                sent.append(message_id_text(producer.send(body.encode(), **kwargs)))
        producer.close()
    except Exception as exc:
        fail(f"produce to {topic} failed: {exc}")
    finally:
        client.close()
    if json_output:
        sys.stdout.write(json.dumps({"topic": topic, "messageIds": sent}) + "\n")
    else:
        typer.echo(f"{len(sent)} messages successfully produced")


@client_app.command("consume")
def consume(topic: str,
            subscription: Annotated[str, typer.Option("--subscription-name", "-s", help="Subscription name")],
            sub_type: Annotated[str, typer.Option("--subscription-type", "-t",
                                                  help="Exclusive, Shared, Failover or Key_Shared")] = "Exclusive",
            num_messages: Annotated[int, typer.Option("--num-messages", "-n", help="0 means forever")] = 1,
            position: Annotated[str, typer.Option("--subscription-position", "-p",
                                                  help="Latest or Earliest")] = "Latest",
            timeout: Annotated[str | None, typer.Option("--timeout", help="Give up after this long idle")] = None,
            service_url: ServiceUrl = DEFAULT_SERVICE_URL,
            json_output: Annotated[bool, typer.Option("--json", help="One JSON object per message")] = False,
            ) -> None:
    """Receive and acknowledge messages from a subscription."""
    if position not in ("Latest", "Earliest"):
        raise typer.BadParameter("--subscription-position is Latest or Earliest")
    kind = consumer_type(sub_type)
    idle_ms = parse_duration_ms(timeout) if timeout else None
    module = pulsar_module()
    client = open_client(service_url)
    received = 0
    try:
        consumer = client.subscribe(topic, subscription, consumer_type=kind,
                                    initial_position=getattr(module.InitialPosition, position))
        while num_messages == 0 or received < num_messages:
            try:
                msg = consumer.receive(timeout_millis=idle_ms) if idle_ms else consumer.receive()
            except module.Timeout:
                fail(f"no message within {timeout}; {received} consumed")
            _print_message(msg, json_output)
            consumer.acknowledge(msg)
            received += 1
        consumer.close()
    except KeyboardInterrupt:
        pass
    except typer.Exit:
        raise
    except Exception as exc:
        fail(f"consume from {topic} failed: {exc}")
    finally:
        client.close()
    typer.echo(f"{received} messages successfully consumed", err=True)


def _print_message(msg: Any, json_output: bool) -> None:
    data: bytes = msg.data()
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        content = data.hex()
    if json_output:
        sys.stdout.write(json.dumps({"messageId": message_id_text(msg.message_id()), "key": msg.partition_key(),
                                     "properties": msg.properties(), "payload": content,
                                     "publishTime": msg.publish_timestamp(),
                                     "redeliveryCount": msg.redelivery_count()}) + "\n")
        sys.stdout.flush()
        return
    properties = ", ".join(f"{k}={v}" for k, v in msg.properties().items())
    typer.echo("----- got message -----")
    typer.echo(f"key:[{msg.partition_key() or 'null'}], properties:[{properties}], content:{content}")
