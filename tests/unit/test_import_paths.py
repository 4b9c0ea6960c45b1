"""One import path per concept: a class is imported from the module that defines it, not
through a module that happens to import it too (``magnetar.config`` once re-exported
``BrokerConfig``, and ``magnetar.storage`` the storage interfaces)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: name -> the one module it is imported from
HOMES = {
    "BrokerConfig": "magnetar.core.broker.broker_config",
    "ConfigError": "magnetar.core.broker.broker_config",
    "TimerAlarm": "magnetar.server.timer_alarm",
    "BrokerTimers": "magnetar.core.broker.broker_timers",
    "LedgerConfig": "magnetar.storage.interfaces",
    "ManagedLedger": "magnetar.storage.interfaces",
    "StorageError": "magnetar.storage.interfaces",
}
#: (file, name, module) imported another way, each with its reason (none now)
KNOWN: set[tuple[str, str, str]] = set()
#: modules that define or may re-export a name under test (core's ledger interfaces live in core)
ALSO_ALLOWED = {
    "LedgerConfig": {"magnetar.core.topics.managed_ledger"},
    "ManagedLedger": {"magnetar.core.topics.managed_ledger"},
    "StorageError": {"magnetar.core.topics.managed_ledger"},
}


def python_files() -> list[Path]:
    return [p for folder in ("src", "tests", "bench", "examples") for p in (ROOT / folder).rglob("*.py")
            if "pulsar_api_pb2" not in p.name]


def test_each_name_is_imported_from_its_home() -> None:
    wrong: list[str] = []
    for path in python_files():
        relative = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
                continue
            for alias in node.names:
                home = HOMES.get(alias.name)
                if home is None or node.module == home or node.module in ALSO_ALLOWED.get(alias.name, ()):
                    continue
                if (relative, alias.name, node.module) not in KNOWN:
                    wrong.append(f"{relative}:{node.lineno}: {alias.name} from {node.module} (its home: {home})")
    assert not wrong, "\n".join(wrong)


def test_the_known_exceptions_still_exist() -> None:
    """An exception that no longer happens is taken off the list."""
    for relative, name, module in KNOWN:
        tree = ast.parse((ROOT / relative).read_text(encoding="utf-8"))
        assert any(isinstance(node, ast.ImportFrom) and node.module == module
                   and any(alias.name == name for alias in node.names) for node in ast.walk(tree)), relative
