"""Magnetar as a PySpark data source: ``format("magnetar")`` for batch and streaming reads and writes.

Layers, from Spark inwards:

* :mod:`.datasource` — :class:`MagnetarDataSource`, the class users register.
* :mod:`.source` / :mod:`.sink` — Spark's reader and writer interfaces; driver-side
  planning lives in :mod:`.planning` and :mod:`.admission`, executor-side reading in
  :mod:`.reading`; :mod:`.holding` keeps a streaming query's durable subscriptions and
  :mod:`.data_loss` its ``failOnDataLoss`` checks.
* :mod:`.options`, :mod:`.offsets`, :mod:`.schema` — plain values: parsed options,
  checkpointed offsets, row layouts.
* :mod:`.rest` — the admin REST v2 calls the driver makes.

Needs the ``spark`` extra: ``pip install "magnetar[spark]"`` (PySpark 4.2+, pyarrow,
the official ``pulsar-client``) and Java 17.
"""

from magnetar.spark.data_loss import MagnetarDataLossError
from magnetar.spark.datasource import MagnetarDataSource
from magnetar.spark.offsets import MessagePosition, OffsetError, SourceOffset
from magnetar.spark.options import MagnetarOptionError
from magnetar.spark.rest import MagnetarAdminError
from magnetar.spark.sink import MagnetarSinkError

__all__ = [
    "MagnetarAdminError",
    "MagnetarDataLossError",
    "MagnetarDataSource",
    "MagnetarOptionError",
    "MagnetarSinkError",
    "MessagePosition",
    "OffsetError",
    "SourceOffset",
]
