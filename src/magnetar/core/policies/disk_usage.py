"""Refusing appends before the disk is full (BookKeeper's ``diskUsageThreshold``).

A filesystem that fills up fails writes half-way, and the broker's own metadata needs
room to record what it already holds. So, as a bookie does, the broker stops taking
appends once usage reaches ``diskUsageThreshold`` (reads, acks and admin go on), warns
from ``diskUsageWarnThreshold``, and takes appends again by itself once usage falls
below the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False)
class DiskUsage:
    threshold: float
    warn_threshold: float
    ratio: float = 0.0
    refusing: bool = False
    warning: bool = False

    def update(self, used_bytes: int, total_bytes: int) -> str | None:
        """Take a new reading; a line worth logging when the state changed."""
        self.ratio = used_bytes / total_bytes if total_bytes > 0 else 0.0
        refusing = self.ratio >= self.threshold
        warning = not refusing and self.ratio >= self.warn_threshold
        changed = (refusing, warning) != (self.refusing, self.warning)
        self.refusing, self.warning = refusing, warning
        if not changed:
            return None
        if refusing:
            return f"{self._usage()} reached diskUsageThreshold {self.threshold:.0%}: appends are refused"
        if warning:
            return f"{self._usage()} is above diskUsageWarnThreshold {self.warn_threshold:.0%}"
        return f"{self._usage()}: appends are taken again"

    def refusal(self) -> str | None:
        """Why an append is refused now, or None."""
        if not self.refusing:
            return None
        return f"Not enough disk space: {self._usage()} is above diskUsageThreshold {self.threshold:.0%}"

    def _usage(self) -> str:
        return f"disk usage {self.ratio:.1%}"
