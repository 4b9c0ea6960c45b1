"""``magnetar standalone`` and the metadata store keys: a bad or unusable URL stops it at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from magnetar.cli.main import app


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("zk:localhost", "metadataStoreUrl='zk:localhost': invalid server"),
        ("etcd:http://h:2379", "etcd metadata store is not supported"),
        ("zk:127.0.0.1:2181", "the standalone broker keeps its metadata in SQLite"),
    ],
)
def test_standalone_refuses_a_metadata_store_url(tmp_path: Path, value: str, match: str) -> None:
    result = CliRunner().invoke(app, ["standalone", "--data-dir", str(tmp_path / "data"),
                                      "--set", f"metadataStoreUrl={value}"])
    assert result.exit_code == 2
    assert match in result.output
    assert not (tmp_path / "data").exists(), "nothing is created before the error"
