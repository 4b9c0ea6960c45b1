"""Regenerate magnetar.wire.pulsar_api_pb2 (.py and .pyi) from PulsarApi.proto.

protoc names its output after the .proto file (PulsarApi_pb2); the package wants
a snake_case module, so the files are generated into a scratch directory, renamed,
and the module name recorded inside them is rewritten to the real import path.

Usage: python scripts/generate_proto.py
"""

from __future__ import annotations

import keyword
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIRE_DIR = ROOT / "src" / "magnetar" / "wire"
PROTO_DIR = WIRE_DIR / "proto"
PROTO_FILE = "PulsarApi.proto"
GENERATED_STEM = "PulsarApi_pb2"
MODULE_STEM = "pulsar_api_pb2"
MODULE_PATH = "magnetar.wire.pulsar_api_pb2"
KEYWORD_ATTRIBUTE = re.compile(rf"^\s*({'|'.join(keyword.kwlist)}):")


def run_protoc(out_dir: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--proto_path={PROTO_DIR}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        str(PROTO_DIR / PROTO_FILE),
    ]
    subprocess.run(command, check=True)


def drop_keyword_attributes(stub: str) -> str:
    """Remove stub lines declaring an attribute named after a Python keyword.

    Schema.Type has a value called ``None``; protoc writes ``None: ...`` into the
    stub, which is not valid Python. The value stays reachable at run time
    through ``Schema.Type.Value("None")``.
    """
    lines = stub.splitlines(keepends=True)
    return "".join(line for line in lines if not KEYWORD_ATTRIBUTE.match(line))


def install(generated: Path, target: Path) -> None:
    text = generated.read_text(encoding="utf-8")
    text = text.replace(f"'{GENERATED_STEM}'", f"'{MODULE_PATH}'")
    if target.suffix == ".pyi":
        text = drop_keyword_attributes(text)
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target.relative_to(ROOT)}")


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        out_dir = Path(scratch)
        run_protoc(out_dir)
        for suffix in (".py", ".pyi"):
            install(out_dir / f"{GENERATED_STEM}{suffix}", WIRE_DIR / f"{MODULE_STEM}{suffix}")


if __name__ == "__main__":
    main()
