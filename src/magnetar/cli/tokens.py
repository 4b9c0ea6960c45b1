"""``magnetar tokens``: secret keys, key pairs and tokens, as ``pulsar tokens``."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from magnetar.cli.output import parse_duration_ms, print_json
from magnetar.core.broker.broker_config import ConfigError
from magnetar.security import token_keys
from magnetar.security.sources import read_source

tokens_app = typer.Typer(help="Keys and tokens for AuthenticationProviderToken (as `pulsar tokens`).",
                         no_args_is_help=True)

Algorithm = Annotated[str | None, typer.Option("--signature-algorithm", "-sa",
                                               help="HS256/384/512, RS*, PS* or ES256/384/512")]


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _write_private(path: Path, data: bytes) -> None:
    """Key files are readable by their owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


@tokens_app.command("create-secret-key")
def create_secret_key(
    output: Annotated[Path | None, typer.Option("--output", "-o", help="file to write the key to")] = None,
    base64_: Annotated[bool, typer.Option("--base64", "-b", help="print the key as base64")] = False,
    algorithm: Algorithm = None,
) -> None:
    """A random HMAC key, for tokenSecretKey."""
    try:
        key = token_keys.create_secret_key(algorithm or "HS256")
    except token_keys.TokenToolError as exc:
        _fail(str(exc))
    if output is not None:
        _write_private(output, base64.b64encode(key) if base64_ else key)
    elif base64_:
        typer.echo(base64.b64encode(key).decode())
    else:
        sys.stdout.buffer.write(key)


@tokens_app.command("create-key-pair")
def create_key_pair(
    output_private_key: Annotated[Path, typer.Option("--output-private-key", help="file for the private key")],
    output_public_key: Annotated[Path, typer.Option("--output-public-key", help="file for the public key")],
    algorithm: Algorithm = None,
) -> None:
    """A private key to sign tokens and its public key, for tokenPublicKey (DER files)."""
    try:
        private, public = token_keys.create_key_pair(algorithm or "RS256")
    except token_keys.TokenToolError as exc:
        _fail(str(exc))
    _write_private(output_private_key, private)
    output_public_key.write_bytes(public)


@tokens_app.command("create")
def create(
    subject: Annotated[str, typer.Option("--subject", "-s", help="the role the token carries")],
    secret_key: Annotated[str | None, typer.Option("--secret-key", "-sk",
                                                   help="file:///path, data:;base64,..., a path or base64")] = None,
    private_key: Annotated[str | None, typer.Option("--private-key", "-pk", help="the same forms")] = None,
    expiry_time: Annotated[str | None, typer.Option("--expiry-time", "-exp", help="e.g. 1h, 7d (none: never)")] = None,
    algorithm: Algorithm = None,
) -> None:
    """A token signed with a secret key or a private key."""
    if (secret_key is None) == (private_key is None):
        _fail("give exactly one of --secret-key and --private-key")
    try:
        expires = parse_duration_ms(expiry_time) // 1000 if expiry_time is not None else None
        if secret_key is not None:
            key: object = read_source("--secret-key", secret_key)
            chosen = algorithm or "HS256"
            if chosen not in token_keys.SECRET_KEY_BYTES:
                raise token_keys.TokenToolError(f"--signature-algorithm {chosen} does not fit a secret key")
        else:
            key = token_keys.load_private_key(read_source("--private-key", private_key or ""))
            chosen = token_keys.signing_algorithm(key, algorithm)
        typer.echo(token_keys.create_token(key, chosen, subject, expires))
    except (ConfigError, token_keys.TokenToolError, typer.BadParameter) as exc:
        _fail(str(exc))


@tokens_app.command("show")
def show(token: Annotated[str, typer.Argument(help="the token")]) -> None:
    """A token's header and claims, without checking its signature."""
    try:
        print_json(token_keys.show_token(token.strip()))
    except token_keys.TokenToolError as exc:
        _fail(str(exc))
