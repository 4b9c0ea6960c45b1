"""The data source's error for options it cannot work with, in a module of its own so that
the modules ``options`` builds on (the schema mapping) can raise it too."""

from __future__ import annotations


class MagnetarOptionError(ValueError):
    """An option the data source cannot work with; the message names it and the fix."""
