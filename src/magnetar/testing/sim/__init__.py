"""Deterministic simulation of the subscription types: the real core driven through random schedules.

In the manner of TigerBeetle's VOPR: one seed derives every option (subscription type,
Key_Shared mode and selector,
broker limits, traffic shape, fault weights) and the whole schedule; a run prints its
seed first; a safety phase runs with faults on and checks invariants after every step,
then a liveness phase turns faults off and requires everything to drain. Checkers
(``checkers``) judge only what clients see; ``world`` holds the system under test.

    python -m magnetar.testing.sim --seed 42            # one schedule
    python -m magnetar.testing.sim --seed 1 --schedules 10000 --jobs 2
    python -m magnetar.testing.sim --seed 1 --schedules 1000 --types Exclusive,Failover
    python -m magnetar.testing.sim --seed 42 --schedule failing.txt   # replay a printed schedule

The broker-wide simulation (``broker_schedules``: several connections, topics and
subscription types over simulated storage with failures and crashes) is the ``broker``
sub-command:

    python -m magnetar.testing.sim broker --seed 1 --schedules 10000 --jobs 2
    python -m magnetar.testing.sim broker --seed 1 --schedules 1000000 --minutes 15
    python -m magnetar.testing.sim broker --seed 42 --schedule failing.txt

Several brokers over one metadata store with sessions and shared ledger files
(``cluster_schedules``: ownership, lookups, fencing through pauses, cuts, kills and store
restarts; docs/cluster.md) is the ``cluster`` sub-command:

    python -m magnetar.testing.sim cluster --seed 1 --schedules 10000 --jobs 2
    python -m magnetar.testing.sim cluster --seed 1 --scenario pulsar-24478
"""

from magnetar.testing.sim.actions import Action, parse_schedule
from magnetar.testing.sim.checkers import ContractChecker, Violation
from magnetar.testing.sim.options import SimOptions
from magnetar.testing.sim.runner import RunResult, run

__all__ = ["Action", "ContractChecker", "RunResult", "SimOptions", "Violation", "parse_schedule", "run"]
