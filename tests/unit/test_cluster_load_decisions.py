"""The load manager's decisions: load reports, leader, placement, shedding, splits."""

from __future__ import annotations

import json
from statistics import pstdev

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.core.cluster.bundle_data import BundleData
from magnetar.core.cluster.bundle_ownership import BundleState
from magnetar.core.cluster.bundle_split import (
    RANGE_EQUALLY_DIVIDE,
    TOPIC_COUNT_EQUALLY_DIVIDE,
    SplitConfig,
    find_bundles_to_split,
    split_boundary,
    split_bundle,
    split_reason,
)
from magnetar.core.cluster.bundles_data import bundles_data, bundles_of
from magnetar.core.cluster.leader_election import (
    AskLeader,
    Election,
    InvalidLeaderData,
    LeaderBroker,
    NoLeader,
    PlaceHere,
    TakeIt,
    election_state,
    route_free_bundle,
)
from magnetar.core.cluster.least_resource_usage import BrokerLoad, best_candidates, select_least_loaded
from magnetar.core.cluster.load_balancer_config import LoadBalancerConfig
from magnetar.core.cluster.load_report import (
    MEGABYTE,
    BrokerLoadReport,
    BundleStats,
    InvalidLoadReport,
    ResourceUsage,
    ResourceWeights,
)
from magnetar.core.cluster.namespace_bundles import (
    InvalidBundle,
    NamespaceBundle,
    NamespaceBundles,
    bundle_hash,
    default_boundaries,
)
from magnetar.core.cluster.namespace_ephemeral_data import NamespaceEphemeralData
from magnetar.core.cluster.threshold_shedder import ShedderConfig, ThresholdShedder
from magnetar.core.cluster.topic_lookup import (
    Acquire,
    AdminRedirect,
    BundleView,
    NotReady,
    Placed,
    Redirect,
    RegisteredBroker,
    decide_admin,
    decide_lookup,
)
from magnetar.core.cluster.transfer_shedder import TransferShedder
from magnetar.core.stats import RateCounter

rates = st.floats(min_value=0, max_value=1e6, allow_nan=False)
counts = st.integers(min_value=0, max_value=10_000)
bundle_stats = st.builds(BundleStats, rates, rates, rates, rates, counts, counts, counts)
bundle_names = st.sampled_from([f"t/ns{n}/{b.range_name}" for n in range(3) for b in NamespaceBundles("t/ns").bundles])
usages = st.builds(ResourceUsage, st.floats(0, 1e4, allow_nan=False), st.floats(0, 1e4, allow_nan=False))
reports = st.builds(BrokerLoadReport, usages, usages, usages, st.dictionaries(bundle_names, bundle_stats, max_size=8),
                    st.integers(0, 2**40))


def bandwidth_report(throughputs: dict[str, float], capacity: float, last_update: int = 1) -> BrokerLoadReport:
    """A broker whose load is its bandwidth in: ``capacity`` bytes/s is 100 %."""
    bundles = {b: BundleStats(msg_rate_in=t / 100, msg_throughput_in=t, topics=1) for b, t in throughputs.items()}
    return BrokerLoadReport(bandwidth_in=ResourceUsage(sum(throughputs.values()), capacity), bundles=bundles,
                            last_update=last_update)


# -- load report ------------------------------------------------------------------------
@given(reports)
def test_a_report_reads_back_from_its_json(report: BrokerLoadReport) -> None:
    data = json.loads(json.dumps(report.to_json()))
    assert BrokerLoadReport.from_json(data) == report


@given(reports)
def test_the_totals_are_the_sums_of_the_bundles(report: BrokerLoadReport) -> None:
    data = report.to_json()
    assert data["numBundles"] == len(report.bundles)
    assert data["numTopics"] == sum(s.topics for s in report.bundles.values())
    assert data["msgRateIn"] == pytest.approx(sum(s.msg_rate_in for s in report.bundles.values()))
    assert data["numConsumers"] == sum(s.consumer_count for s in report.bundles.values())
    assert data["numProducers"] == sum(s.producer_count for s in report.bundles.values())


def test_a_report_carries_pulsars_field_names() -> None:
    report = BrokerLoadReport(cpu=ResourceUsage(50, 100), bundles={"t/n/0x00000000_0xffffffff": BundleStats(
        1.0, 2.0, 3.0, 4.0, 5, 6, 7)}, last_update=9)
    data = report.to_json()
    assert {"cpu", "bandwidthIn", "bandwidthOut", "msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut",
            "numTopics", "numConsumers", "numProducers", "numBundles", "bundles", "lastStats",
            "lastUpdate"} <= set(data)
    assert data["lastStats"]["t/n/0x00000000_0xffffffff"] == {
        "msgRateIn": 1.0, "msgRateOut": 2.0, "msgThroughputIn": 3.0, "msgThroughputOut": 4.0,
        "consumerCount": 5, "producerCount": 6, "topics": 7}


def test_a_registration_without_load_fields_is_an_empty_report() -> None:
    assert BrokerLoadReport.from_json({"pulsarServiceUrl": "pulsar://h:1", "numBundles": 0}) == BrokerLoadReport()


@pytest.mark.parametrize("bad", [[], {"cpu": 3}, {"lastStats": []}, {"lastStats": {"b": {"msgRateIn": "x"}}},
                                 {"msgRateIn": 1, "lastUpdate": True}])
def test_a_malformed_report_is_refused(bad: object) -> None:
    with pytest.raises(InvalidLoadReport):
        BrokerLoadReport.from_json(bad)


def test_the_load_is_the_largest_weighted_usage() -> None:
    report = BrokerLoadReport(cpu=ResourceUsage(30, 100), bandwidth_in=ResourceUsage(50, 100),
                              bandwidth_out=ResourceUsage(10, 100))
    assert report.max_resource_usage_with_weight(ResourceWeights()) == pytest.approx(0.5)
    assert report.max_resource_usage_with_weight(ResourceWeights(bandwidth_in=0.2)) == pytest.approx(0.3)
    assert BrokerLoadReport(cpu=ResourceUsage(5, 0)).max_resource_usage_with_weight(ResourceWeights()) == 0


# -- leader -----------------------------------------------------------------------------
def test_election_states() -> None:
    assert election_state("a", None, False) is Election.TRY_TO_LEAD
    assert election_state("a", LeaderBroker("a"), True) is Election.LEADING
    assert election_state("a", LeaderBroker("a"), False) is Election.FOLLOWING  # an earlier session's node
    assert election_state("a", LeaderBroker("b"), True) is Election.FOLLOWING


@given(st.lists(st.sampled_from("abcde"), min_size=1, unique=True), st.sampled_from("abcde"), st.booleans())
def test_at_most_one_broker_places_a_free_bundle(brokers: list[str], holder: str, created: bool) -> None:
    """Every broker sees the one node the store holds; only its creator, in the session
    that created it, decides where free bundles go."""
    node = LeaderBroker(holder)
    placing = [b for b in brokers
               if isinstance(route_free_bundle(b, holder, election_state(b, node, created and b == holder)
                                               is Election.LEADING, False), PlaceHere)]
    assert len(placing) <= 1
    assert all(b == holder for b in placing)


def test_a_free_bundle_is_routed_through_the_leader() -> None:
    assert route_free_bundle("a", "b", False, False) == AskLeader("b")
    assert route_free_bundle("a", "a", True, False) == PlaceHere()
    assert route_free_bundle("a", "b", False, True) == TakeIt()
    assert isinstance(route_free_bundle("a", None, False, False), NoLeader)
    assert isinstance(route_free_bundle("a", "a", False, False), NoLeader)


def test_leader_data_reads_back() -> None:
    leader = LeaderBroker("h:8080", "http://h:8080")
    assert LeaderBroker.from_json(json.dumps(leader.to_json())) == leader
    for bad in (b"{", b"[]", b'{"brokerId": ""}', {"serviceUrl": "x"}):
        with pytest.raises(InvalidLeaderData):
            LeaderBroker.from_json(bad)


# -- placement --------------------------------------------------------------------------
loads_strategy = st.dictionaries(st.sampled_from(["a:1", "b:1", "c:1", "d:1"]),
                                 st.builds(BrokerLoad, st.floats(0, 3, allow_nan=False), st.integers(0, 50)),
                                 max_size=4)


@given(loads_strategy)
def test_placement_picks_a_registered_broker_below_the_average_when_one_is(loads: dict[str, BrokerLoad]) -> None:
    chosen = select_least_loaded(loads)
    if not loads:
        assert chosen is None
        return
    assert chosen in loads
    average = sum(load.usage for load in loads.values()) / len(loads)
    if any(load.usage + 0.1 <= average for load in loads.values()):
        assert loads[chosen].usage + 0.1 <= average
    assert select_least_loaded(dict(reversed(list(loads.items())))) == chosen


def test_placement_spreads_bundles_over_the_idle_brokers() -> None:
    loads = {"a:1": BrokerLoad(0.9, 10), "b:1": BrokerLoad(0.0, 0), "c:1": BrokerLoad(0.01, 0)}
    placed = []
    for _ in range(6):
        chosen = select_least_loaded(loads)
        assert chosen is not None
        placed.append(chosen)
        loads[chosen] = BrokerLoad(loads[chosen].usage, loads[chosen].bundles + 1)
    assert sorted(placed) == ["b:1"] * 3 + ["c:1"] * 3
    assert best_candidates({"a:1": BrokerLoad(0.9, 0), "b:1": BrokerLoad(0.5, 5)}) == ["b:1"]
    assert best_candidates({"a:1": BrokerLoad(0.9, 0), "b:1": BrokerLoad(0.95, 5)}) == ["a:1", "b:1"]


# -- shedding ---------------------------------------------------------------------------
NO_MINIMUM = ShedderConfig(history_percentage=0, min_throughput_threshold_mbytes=0)


def skewed(total_bundles: int = 12, capacity: float = 1000.0) -> dict[str, BrokerLoadReport]:
    hot = {f"t/n/0x{i:08x}_0x{i + 1:08x}": 100.0 for i in range(total_bundles)}
    return {"a:1": bandwidth_report(hot, capacity), "b:1": bandwidth_report({}, capacity),
            "c:1": bandwidth_report({}, capacity)}


def test_the_overloaded_broker_sheds_what_brings_it_back_with_reasons() -> None:
    shedder = ThresholdShedder(NO_MINIMUM)
    result = shedder.find_bundles_for_unloading(skewed(), now_ms=0)
    assert {d.broker for d in result.unloads} == {"a:1"}
    # 120 % against an average of 40 %: it sheds what brings it nearest to 40 + 10 - 5 points
    # (7 bundles leave it at 50 %, 8 at 40 %: as near, and it does not overshoot for a tie)
    assert len(result.unloads) == 7
    assert all("above the average" in d.reason for d in result.unloads)


def test_nothing_is_shed_within_the_threshold_or_under_the_minimum_throughput() -> None:
    even = {"a:1": bandwidth_report({"t/n/1": 400, "t/n/2": 100}, 1000),
            "b:1": bandwidth_report({"t/n/3": 450}, 1000)}
    assert ThresholdShedder(NO_MINIMUM).find_bundles_for_unloading(even, 0).unloads == []
    result = ThresholdShedder(ShedderConfig(history_percentage=0)).find_bundles_for_unloading(skewed(), 0)
    assert result.unloads == []
    assert "loadBalancerBundleUnloadMinThroughputThreshold" in result.skipped[0].reason


def test_a_broker_with_one_bundle_is_not_shed() -> None:
    reports = {"a:1": bandwidth_report({"t/n/1": 900}, 1000), "b:1": bandwidth_report({}, 1000)}
    result = ThresholdShedder(NO_MINIMUM).find_bundles_for_unloading(reports, 0)
    assert result.unloads == [] and "1 bundle" in result.skipped[0].reason


def test_the_next_cycle_waits_for_fresh_reports_and_moved_bundles_and_the_grace_period_holds() -> None:
    shedder = ThresholdShedder(NO_MINIMUM)
    first = shedder.find_bundles_for_unloading(skewed(), now_ms=0)
    assert first.unloads
    again = shedder.find_bundles_for_unloading(skewed(), now_ms=1000)
    assert again.unloads == [] and "waiting for its load report" in again.skipped[0].reason
    fresh = {b: BrokerLoadReport(r.cpu, r.bandwidth_in, r.bandwidth_out, r.bundles, 2) for b, r in skewed().items()}
    moving = shedder.find_bundles_for_unloading(fresh, now_ms=2000)
    assert moving.unloads == [] and "to be reported by their new owners" in moving.skipped[0].reason
    # a minute later it stops waiting; the bundles it moved stay where they went for the grace period
    later = shedder.find_bundles_for_unloading(fresh, now_ms=62_000)
    assert later.unloads
    assert not {d.bundle for d in later.unloads} & {d.bundle for d in first.unloads}


def test_moved_bundles_reported_by_their_new_owner_end_the_wait() -> None:
    shedder = ThresholdShedder(NO_MINIMUM)
    reports = skewed()
    moved = [d.bundle for d in shedder.find_bundles_for_unloading(reports, now_ms=0).unloads]
    hot = reports["a:1"].bundles
    after = {"a:1": bandwidth_report({b: 100.0 for b in hot if b not in moved}, 1000, 2),
             "b:1": bandwidth_report({b: 100.0 for b in moved[::2]}, 1000, 2),
             "c:1": bandwidth_report({b: 100.0 for b in moved[1::2]}, 1000, 2)}
    result = shedder.find_bundles_for_unloading(after, now_ms=1000)
    assert result.unloads == [] and result.skipped == []  # settled, and within the threshold: nothing to do


def test_at_most_the_configured_number_of_brokers_shed_in_a_cycle() -> None:
    reports = {f"{name}:1": bandwidth_report({f"t/{name}/{i}": 300.0 for i in range(3)}, 1000) for name in "abc"}
    reports.update({f"{name}:1": bandwidth_report({}, 1000) for name in "defgh"})
    config = ShedderConfig(history_percentage=0, min_throughput_threshold_mbytes=0, max_brokers_per_cycle=2)
    result = ThresholdShedder(config).find_bundles_for_unloading(reports, 0)
    assert len({d.broker for d in result.unloads}) == 2
    assert any("already shed in this cycle" in s.reason for s in result.skipped)


broker_loads = st.dictionaries(st.sampled_from([f"b{i}:1" for i in range(5)]),
                               st.dictionaries(st.text("0123456789abcdef", min_size=1, max_size=3),
                                               st.floats(0, 500, allow_nan=False), max_size=10),
                               min_size=1, max_size=5)


@settings(max_examples=200)
@given(broker_loads, st.integers(1, 4))
def test_shedding_properties(throughputs: dict[str, dict[str, float]], max_brokers: int) -> None:
    capacity = 1000.0
    reports = {broker: bandwidth_report({f"{broker}/{b}": t for b, t in bundles.items()}, capacity)
               for broker, bundles in throughputs.items()}
    config = ShedderConfig(history_percentage=0, min_throughput_threshold_mbytes=0, max_brokers_per_cycle=max_brokers)
    result = ThresholdShedder(config).find_bundles_for_unloading(reports, 0)
    loads = {b: sum(t.values()) / capacity for b, t in throughputs.items()}
    average = sum(loads.values()) / len(loads)
    shedding = {d.broker for d in result.unloads}
    assert len(shedding) <= max_brokers
    assert len({d.bundle for d in result.unloads}) == len(result.unloads)
    for decision in result.unloads:
        assert decision.bundle in reports[decision.broker].bundles
        assert loads[decision.broker] > average + 0.1
    for broker in shedding:
        # it keeps at least one bundle, and sheds less than twice what it needs to
        kept = set(reports[broker].bundles) - {d.bundle for d in result.unloads if d.broker == broker}
        assert kept
        moved = [reports[broker].bundles[d.bundle].msg_throughput for d in result.unloads if d.broker == broker]
        needed = (loads[broker] - (average + 0.05)) * capacity
        assert sum(moved) < 2 * needed + 1e-6


# -- splits -----------------------------------------------------------------------------
def test_split_reasons_with_pulsars_defaults() -> None:
    config = SplitConfig()
    assert split_reason(BundleStats(topics=1001), config) is not None
    assert split_reason(BundleStats(topics=1, msg_rate_in=1e9), config) is None  # one topic cannot be split
    assert "Sessions" in (split_reason(BundleStats(topics=2, consumer_count=600, producer_count=401), config) or "")
    assert split_reason(BundleStats(topics=2, consumer_count=5000), SplitConfig(max_sessions=-1)) is None
    assert "MsgRate" in (split_reason(BundleStats(topics=2, msg_rate_in=20000, msg_rate_out=10001), config) or "")
    assert "Bandwidth" in (split_reason(BundleStats(topics=2, msg_throughput_out=101 * MEGABYTE), config) or "")
    assert split_reason(BundleStats(topics=1000, consumer_count=1000, msg_rate_in=30000,
                                    msg_throughput_in=100 * MEGABYTE), config) is None


def test_splits_respect_the_namespace_maximum_and_the_cycle_limit() -> None:
    stats = {f"t/n/0x{i:08x}_0x{i + 1:08x}": BundleStats(topics=5) for i in range(20)}
    config = SplitConfig(max_topics=4, max_bundles=24, max_per_cycle=10)
    assert len(find_bundles_to_split(stats, {"t/n": 20}, config)) == 4
    assert len(find_bundles_to_split(stats, {"t/n": 2}, config)) == 10
    assert find_bundles_to_split(stats, {"t/n": 2}, SplitConfig(enabled=False, max_topics=4)) == []


def test_range_equally_divide_cuts_a_bundle_in_halves() -> None:
    bundles = NamespaceBundles("t/n")
    first = bundles.bundles[0]
    halves = split_bundle(bundles, first)
    assert [b.range_name for b in halves.bundles[:2]] == ["0x00000000_0x20000000", "0x20000000_0x40000000"]
    assert halves == bundles.split_in_two(first)
    with pytest.raises(InvalidBundle, match="Unsupported"):
        split_bundle(bundles, first, "no_such_algorithm")
    with pytest.raises(InvalidBundle):
        split_bundle(bundles, NamespaceBundle("t/n", 1, 2))
    with pytest.raises(InvalidBundle):
        split_boundary(NamespaceBundle("t/n", 1, 2), RANGE_EQUALLY_DIVIDE)


@given(st.lists(st.integers(0, 0xFFFFFFFF), min_size=2, max_size=50, unique=True))
def test_topic_count_equally_divide_leaves_as_many_topics_on_each_side(hashes: list[int]) -> None:
    bundle = NamespaceBundle("t/n", 0, 0xFFFFFFFF)
    boundary = split_boundary(bundle, TOPIC_COUNT_EQUALLY_DIVIDE, hashes)
    below = sum(1 for h in hashes if h < boundary)
    assert abs(below - (len(hashes) - below)) <= 1
    assert bundle.lower < boundary < bundle.upper


def test_topic_count_equally_divide_needs_two_topics_of_the_bundle() -> None:
    bundle = NamespaceBundles("t/n").bundles[0]
    inside = bundle_hash("persistent://t/n/x") if bundle.includes("persistent://t/n/x") else bundle.lower
    with pytest.raises(InvalidBundle, match="needs two"):
        split_boundary(bundle, TOPIC_COUNT_EQUALLY_DIVIDE, [inside, 0xF0000000])


# -- settings ---------------------------------------------------------------------------
def test_load_balancer_settings_have_pulsars_defaults_and_read_from_the_broker_config() -> None:
    default = LoadBalancerConfig.from_properties({})
    assert (default.loadBalancerEnabled, default.loadBalancerSheddingEnabled,
            default.loadBalancerBrokerThresholdShedderPercentage, default.loadBalancerSheddingGracePeriodMinutes,
            default.loadBalancerMaxNumberOfBrokerSheddingPerCycle, default.loadBalancerReportUpdateMinIntervalMillis,
            default.loadBalancerNamespaceBundleMaxTopics, default.loadBalancerNamespaceBundleMaxSessions,
            default.loadBalancerNamespaceBundleMaxMsgRate, default.loadBalancerNamespaceBundleMaxBandwidthMbytes,
            default.loadBalancerNamespaceMaximumBundles) == (True, True, 10, 30, 3, 5000, 1000, 1000, 30000, 100, 128)
    config = BrokerConfig().with_overrides({"loadBalancerSheddingEnabled": "false",
                                            "loadBalancerSheddingIntervalMinutes": "0.05",
                                            "loadBalancerOverrideBrokerNicSpeedGbps": "10"})
    settings = LoadBalancerConfig.from_properties(config.extra)
    assert not settings.loadBalancerSheddingEnabled
    assert settings.loadBalancerSheddingIntervalMinutes == 0.05
    assert settings.nic_speed_kbytes == pytest.approx(10e9 / 8 / 1024)
    assert settings.shedder.grace_period_ms == 30 * 60_000


@pytest.mark.parametrize(("key", "value", "says"), [
    ("loadBalancerEnabled", "yes", "expected bool"),
    ("loadBalancerReportUpdateMinIntervalMillis", "0", "must be greater than 0"),
    ("loadBalancerReportUpdateMinIntervalMillis", "1.5", "expected int"),
    ("loadBalancerSheddingIntervalMinutes", "-1", "must be greater than 0"),
    ("loadBalancerBrokerThresholdShedderPercentage", "-5", "must not be negative"),
    ("loadBalancerHistoryResourcePercentage", "1", "less than 1"),
    ("loadBalancerOverrideBrokerNicSpeedGbps", "0", "must be greater than 0"),
    ("loadBalancerOverrideBrokerNicSpeedGbps", "fast", "expected float"),
    ("defaultNamespaceBundleSplitAlgorithm", "specified_positions_divide", "use one of"),
    ("loadBalancerMaxNumberOfBrokerSheddingPerCycle", "0", "must be greater than 0"),
])
def test_bad_load_balancer_settings_are_refused_naming_the_key(key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        LoadBalancerConfig.from_properties({key: value})
    assert key in str(refused.value)


# -- transfer shedder -------------------------------------------------------------------
def test_the_transfer_shedder_moves_half_the_difference_to_the_least_loaded() -> None:
    reports = skewed()  # 120 %, 0 %, 0 %
    result = TransferShedder(NO_MINIMUM).find_bundles_for_unloading(reports, 0)
    # a:1 and the least loaded (b:1, by id) pair once: half of 120 points, 6 bundles, to b:1
    assert {d.broker for d in result.unloads} == {"a:1"}
    assert {d.destination for d in result.unloads} == {"b:1"}
    assert len(result.unloads) == 6 and all("loadBalancerBrokerLoadTargetStd" in d.reason for d in result.unloads)
    untransferred = TransferShedder(NO_MINIMUM, transfer_enabled=False).find_bundles_for_unloading(skewed(), 0)
    assert {d.destination for d in untransferred.unloads} == {None}
    assert TransferShedder(NO_MINIMUM, target_std=1.0).find_bundles_for_unloading(skewed(), 0).unloads == []


@settings(max_examples=200)
@given(broker_loads, st.integers(1, 4))
def test_transfers_lower_the_spread_and_pair_each_broker_once(throughputs: dict[str, dict[str, float]],
                                                              max_pairs: int) -> None:
    capacity = 1000.0
    reports = {broker: bandwidth_report({f"{broker}/{b}": t for b, t in bundles.items()}, capacity)
               for broker, bundles in throughputs.items()}
    config = ShedderConfig(history_percentage=0, min_throughput_threshold_mbytes=0, max_brokers_per_cycle=max_pairs)
    result = TransferShedder(config).find_bundles_for_unloading(reports, 0)
    sources = {d.broker for d in result.unloads}
    targets = {d.destination for d in result.unloads}
    assert not sources & targets and len(sources) <= max_pairs and len(targets) <= max_pairs
    after = {b: sum(t.values()) for b, t in throughputs.items()}
    for decision in result.unloads:
        assert decision.destination is not None
        moved = reports[decision.broker].bundles[decision.bundle].msg_throughput
        after[decision.broker] -= moved
        after[decision.destination] += moved
    if result.unloads:
        before = pstdev([sum(t.values()) for t in throughputs.values()])
        assert pstdev(after.values()) < before


def test_the_shedding_strategy_setting_picks_the_shedder() -> None:
    assert type(LoadBalancerConfig.from_properties({}).make_shedder()) is ThresholdShedder
    transfer = LoadBalancerConfig.from_properties({
        "loadBalancerLoadSheddingStrategy": "org.apache.pulsar.broker.loadbalance.extensions.scheduler.TransferShedder",
        "loadBalancerBrokerLoadTargetStd": "0.1", "loadBalancerTransferEnabled": "false"}).make_shedder()
    assert isinstance(transfer, TransferShedder) and transfer.target_std == 0.1 and not transfer.transfer_enabled
    for key, value in (("loadBalancerLoadSheddingStrategy", "UniformLoadShedder"),
                       ("loadBalancerBrokerLoadTargetStd", "-0.1")):
        with pytest.raises(ConfigError, match=key):
            LoadBalancerConfig.from_properties({key: value})


# -- bundles in the policies, recent rates ------------------------------------------------
def test_a_namespaces_bundles_from_its_policies() -> None:
    assert bundles_of("t/n", None) == NamespaceBundles("t/n")
    assert bundles_of("t/n", {"bundles": {"numBundles": 16}}) == NamespaceBundles("t/n", default_boundaries(16))
    assert len(bundles_of("t/n", {"bundles": {"numBundles": True}})) == 4
    split = NamespaceBundles("t/n").split_in_two(NamespaceBundles("t/n").bundles[0])
    assert bundles_of("t/n", {"bundles": bundles_data(split)}) == split
    for bad in (["0x00000000", "x"], ["0x10000000", "0xffffffff"], ["0x00000000", "0x80000000", "0x70000000",
                                                                   "0xffffffff"], [1, 2]):
        with pytest.raises(InvalidBundle):
            bundles_of("t/n", {"bundles": {"boundaries": bad}})


def test_a_recent_rate_counts_over_what_the_counter_has_seen() -> None:
    counter = RateCounter()
    assert counter.recent_rate(0) == (0.0, 0.0)
    for second in range(3):
        counter.add(100_000 + second * 1000, 50, 500)
    # 150 messages over the 3 s since the first sample, where the 10 s window says 15/s
    assert counter.recent_rate(103_000) == (50.0, 500.0)
    assert counter.rate(103_000) == (15.0, 150.0)
    fresh = RateCounter()
    fresh.add(100_000, 50, 500)
    assert fresh.recent_rate(100_100) == (50.0, 500.0)  # over one second at least
    assert counter.recent_rate(200_000) == (0.0, 0.0)


# -- lookups of a free bundle through the leader --------------------------------------------
def registered(*ids: str) -> dict[str, RegisteredBroker]:
    return {b: RegisteredBroker(NamespaceEphemeralData(b, f"pulsar://{b}", None, f"http://{b}")) for b in ids}


def test_a_free_bundles_lookup_follows_the_leaders_placement() -> None:
    free = BundleView(BundleState.UNOWNED, None)
    brokers = registered("a:1", "b:1", "leader:1")
    to_leader = decide_lookup("a:1", free, brokers, placed=Placed("leader:1", authoritative=False))
    assert to_leader == Redirect("leader:1", "pulsar://leader:1", None, authoritative=False)
    assert decide_lookup("leader:1", free, brokers, placed=Placed("b:1")) == Redirect("b:1", "pulsar://b:1", None)
    assert decide_lookup("b:1", free, brokers, authoritative=True, placed=Placed("a:1")) == Acquire()
    assert decide_lookup("a:1", free, brokers, placed=Placed("a:1")) == Acquire()
    assert isinstance(decide_lookup("a:1", free, brokers, placed=Placed("gone:1")), NotReady)
    # admin requests: 307 to the leader as they are, then to its choice with authoritative=true
    path = "/admin/v2/persistent/t/n/x/stats?x=1"
    assert decide_admin("a:1", free, brokers, path, placed=Placed("leader:1", authoritative=False)) == \
        AdminRedirect("http://leader:1/admin/v2/persistent/t/n/x/stats?x=1")
    assert decide_admin("leader:1", free, brokers, path, placed=Placed("b:1")) == \
        AdminRedirect("http://b:1/admin/v2/persistent/t/n/x/stats?x=1&authoritative=true")
    assert decide_admin("b:1", free, brokers, path + "&authoritative=true", placed=Placed("a:1")) == Acquire()


# -- bundle data ------------------------------------------------------------------------------
def test_bundle_data_averages_its_samples_then_ages_them() -> None:
    data = BundleData()
    for rate in (10.0, 20.0, 30.0):
        data = data.update(BundleStats(msg_rate_in=rate, topics=2))
    assert data.short_term.msg_rate_in == pytest.approx(20.0) and data.long_term.msg_rate_in == pytest.approx(20.0)
    assert data.short_term.num_samples == 3 and data.topics == 2
    for _ in range(100):
        data = data.update(BundleStats(msg_rate_in=100.0, topics=2))
    assert data.short_term.num_samples == 10 and data.short_term.msg_rate_in == pytest.approx(100.0, rel=1e-3)
    assert data.long_term.msg_rate_in == pytest.approx((60 + 100 * 100) / 103)  # the long term remembers more
    assert BundleData.from_json(json.loads(json.dumps(data.to_json()))) == data
    assert set(data.to_json()) == {"shortTermData", "longTermData", "topics"}
    for bad in ([], {"shortTermData": {}}, {"shortTermData": data.short_term.to_json(), "longTermData": 3},
                {**data.to_json(), "topics": "x"}):
        with pytest.raises(InvalidLoadReport):
            BundleData.from_json(bad)
