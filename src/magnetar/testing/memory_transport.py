"""A transport for a broker connection in the same process: what the broker writes goes to
:meth:`MemoryTransport.write` (subclasses count or decode it), and the socket's flow control
is a no-op, so a test or benchmark drives ``ServerConnection`` without sockets."""

from __future__ import annotations

from typing import Any


class MemoryTransport:
    def __init__(self, peer: tuple[str, int]) -> None:
        self.peer = peer
        self.written = 0
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def writelines(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self.write(chunk)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True
