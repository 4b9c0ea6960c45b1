package io.magnetar.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Set;
import java.util.UUID;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.apache.pulsar.common.policies.data.SubscriptionStats;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The admin client: tenants, namespaces, policies, topics, subscriptions, stats and Pulsar's errors. */
@Timeout(60)
class AdminTest extends ClientTests {

    private static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    @Test
    void tenantsAndNamespaces() throws Exception {
        String tenant = unique("tenant");
        assertTrue(admin.clusters().getClusters().contains("standalone"));
        admin.tenants().createTenant(tenant, TenantInfo.builder().allowedClusters(Set.of("standalone"))
                .adminRoles(Set.of("ops")).build());
        assertTrue(admin.tenants().getTenants().contains(tenant));
        assertEquals(Set.of("ops"), admin.tenants().getTenantInfo(tenant).getAdminRoles());
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.tenants().createTenant(tenant,
                TenantInfo.builder().allowedClusters(Set.of("standalone")).build()));
        String ns = tenant + "/ns";
        admin.namespaces().createNamespace(ns);
        assertEquals(List.of(ns), admin.namespaces().getNamespaces(tenant));
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.namespaces().createNamespace(ns));
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.tenants().deleteTenant(tenant));
        admin.namespaces().deleteNamespace(ns);
        admin.tenants().deleteTenant(tenant);
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.tenants().getTenantInfo(tenant));
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.namespaces().getPolicies(tenant + "/missing"));
    }

    @Test
    void namespacePolicies() throws Exception {
        String ns = "public/" + unique("policies");
        admin.namespaces().createNamespace(ns);
        admin.namespaces().setRetention(ns, new RetentionPolicies(60, 100));
        assertEquals(new RetentionPolicies(60, 100), admin.namespaces().getRetention(ns));
        admin.namespaces().setNamespaceMessageTTL(ns, 3600);
        assertEquals(3600, admin.namespaces().getNamespaceMessageTTL(ns));
        admin.namespaces().setDeduplicationStatus(ns, true);
        assertEquals(true, admin.namespaces().getDeduplicationStatus(ns));
        admin.namespaces().setMaxProducersPerTopic(ns, 3);
        assertEquals(3, admin.namespaces().getMaxProducersPerTopic(ns));
        assertEquals(60, admin.namespaces().getPolicies(ns).retention_policies.getRetentionTimeInMinutes());
        assertThrows(PulsarAdminException.PreconditionFailedException.class,
                () -> admin.namespaces().setMaxProducersPerTopic(ns, -1));
        admin.namespaces().deleteNamespace(ns);
    }

    @Test
    void topicsSubscriptionsAndStats() throws Exception {
        String topic = Broker.topic("admin");
        admin.topics().createNonPartitionedTopic(topic);
        assertThrows(PulsarAdminException.ConflictException.class,
                () -> admin.topics().createNonPartitionedTopic(topic));
        assertTrue(admin.topics().getList("public/default").contains(topic));
        String partitioned = Broker.topic("admin-partitioned");
        admin.topics().createPartitionedTopic(partitioned, 3);
        assertEquals(3, admin.topics().getPartitionedTopicMetadata(partitioned).partitions);
        assertTrue(admin.topics().getPartitionedTopicList("public/default").contains(partitioned));

        admin.topics().createSubscription(topic, "made", MessageId.earliest);
        assertThrows(PulsarAdminException.ConflictException.class,
                () -> admin.topics().createSubscription(topic, "made", MessageId.earliest));
        try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).producerName("p1")
                        .enableBatching(false).create();
                Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("live")
                        .isAckReceiptEnabled(true).subscribe()) {
            for (int i = 0; i < 5; i++) {
                producer.send("m-" + i);
            }
            Broker.receive(consumer, 2);
            assertEquals(Set.of("made", "live"), Set.copyOf(admin.topics().getSubscriptions(topic)));
            TopicStats stats = admin.topics().getStats(topic);
            assertEquals(5, stats.getMsgInCounter());
            assertEquals("p1", stats.getPublishers().get(0).getProducerName());
            SubscriptionStats made = stats.getSubscriptions().get("made");
            assertEquals(5, made.getMsgBacklog());
            assertEquals(3, stats.getSubscriptions().get("live").getMsgBacklog());
            assertEquals(1, stats.getSubscriptions().get("live").getConsumers().size());
            assertEquals(5, admin.topics().getInternalStats(topic).numberOfEntries);

            admin.topics().skipMessages(topic, "made", 2);
            assertEquals(3, admin.topics().getStats(topic).getSubscriptions().get("made").getMsgBacklog());
            admin.topics().skipAllMessages(topic, "made");
            assertEquals(0, admin.topics().getStats(topic).getSubscriptions().get("made").getMsgBacklog());
            admin.topics().resetCursor(topic, "made", MessageId.earliest);
            assertEquals(5, admin.topics().getStats(topic).getSubscriptions().get("made").getMsgBacklog());
            assertEquals("m-0", new String(admin.topics().peekMessages(topic, "made", 1).get(0).getData()));
            assertThrows(PulsarAdminException.PreconditionFailedException.class,
                    () -> admin.topics().deleteSubscription(topic, "live"));
        }
        admin.topics().deleteSubscription(topic, "made");
        assertFalse(admin.topics().getSubscriptions(topic).contains("made"));
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.topics().deleteSubscription(topic, "made"));
        admin.topics().delete(topic, true);
        admin.topics().deletePartitionedTopic(partitioned);
    }

    @Test
    void badRequestsGetPulsarsErrorTypes() {
        String missing = Broker.topic("missing");
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.topics().getStats(missing));
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.topics().delete(missing));
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.topics().getSubscriptions("persistent://no-such-tenant/ns/t"));
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.namespaces().getTopics("public/no-such-namespace"));
        assertThrows(PulsarAdminException.PreconditionFailedException.class, () -> admin.tenants().createTenant(
                unique("tenant"), TenantInfo.builder().allowedClusters(Set.of("no-such-cluster")).build()));
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.namespaces().createNamespace("no-such-tenant/ns"));
    }
}
