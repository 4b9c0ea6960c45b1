"""What the ``admin``, ``client`` and ``perf`` commands share: output, errors, units."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

console = Console()
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_SIZE = re.compile(r"^\s*(-?\d+)\s*([kKmMgGtT])?\s*$")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_SIZE_FACTOR = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr and a non-zero exit status."""
    first_line = message.strip().splitlines()[0] if message.strip() else "failed"
    typer.echo(f"error: {first_line}", err=True)
    raise typer.Exit(code)


def parse_duration_ms(text: str, default_unit: str = "s") -> int:
    """``100ms``, ``5s``, ``2m``, ``3h``, ``1d``; a bare number is in ``default_unit``."""
    match = _DURATION.match(text)
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a duration such as 500ms, 10s, 5m, 2h or 1d")
    return int(float(match.group(1)) * _DURATION_MS[match.group(2) or default_unit])


def parse_size_bytes(text: str) -> int:
    """``10``, ``512K``, ``10M``, ``2G`` (powers of 1024), ``-1`` for unlimited."""
    match = _SIZE.match(text)
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a size such as 512K, 10M or 2G")
    return int(match.group(1)) * _SIZE_FACTOR.get((match.group(2) or "").lower(), 1)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False) + "\n")


def print_list(title: str, items: Iterable[Any]) -> None:
    table = Table(title=None)
    table.add_column(title)
    for item in items:
        table.add_row(str(item))
    console.print(table)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return "" if value is None else str(value)


def print_mapping(value: Mapping[str, Any], title: str | None = None) -> None:
    table = Table(title=title, show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    for key, item in value.items():
        table.add_row(str(key), _cell(item))
    console.print(table)


def print_rows(rows: Sequence[Mapping[str, Any]], columns: list[str], title: str | None = None) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_cell(row.get(column)) for column in columns))
    console.print(table)
