package io.magnetar.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

@Timeout(60)
class SubscriptionsTest extends ClientTests {

    @ParameterizedTest
    @EnumSource(SubscriptionType.class)
    void produceAndConsumeWithEachSubscriptionType(SubscriptionType type) throws Exception {
        String topic = Broker.topic("sub-" + type);
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                        .subscriptionType(type).subscribe();
                Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
            for (int i = 0; i < 20; i++) {
                producer.newMessage().key("k" + (i % 4)).value("m-" + i).send();
            }
            List<Message<String>> got = Broker.receive(consumer, 20);
            for (int i = 0; i < 20; i++) {
                assertEquals("m-" + i, got.get(i).getValue());
                assertEquals("k" + (i % 4), got.get(i).getKey());
            }
            Broker.expectNothing(consumer, Duration.ofMillis(200));
            if (type == SubscriptionType.Exclusive) {
                assertThrows(PulsarClientException.ConsumerBusyException.class, () -> client.newConsumer(Schema.STRING)
                        .topic(topic).subscriptionName("s").subscriptionType(type).subscribe());
            }
        }
    }

    @Test
    void sharedSpreadsMessagesOverConsumers() throws Exception {
        String topic = Broker.topic("shared-spread");
        try (Consumer<String> a = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                        .subscriptionType(SubscriptionType.Shared).receiverQueueSize(5).subscribe();
                Consumer<String> b = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                        .subscriptionType(SubscriptionType.Shared).receiverQueueSize(5).subscribe();
                Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).enableBatching(false)
                        .create()) {
            for (int i = 0; i < 40; i++) {
                producer.send("m-" + i);
            }
            Set<String> seen = new HashSet<>();
            int fromA = 0;
            int fromB = 0;
            while (seen.size() < 40) {
                Message<String> m = a.receive(100, TimeUnit.MILLISECONDS);
                if (m != null) {
                    a.acknowledge(m);
                    seen.add(m.getValue());
                    fromA++;
                }
                m = b.receive(100, TimeUnit.MILLISECONDS);
                if (m != null) {
                    b.acknowledge(m);
                    seen.add(m.getValue());
                    fromB++;
                }
            }
            assertTrue(fromA > 0 && fromB > 0, "a got " + fromA + ", b got " + fromB);
        }
    }

    /** Key_Shared keeps each key's order while consumers join and leave (the one leaving
     * with messages it had not acknowledged: they go to another consumer, in order). */
    @Test
    void keySharedKeepsOrderPerKeyAsConsumersJoinAndLeave() throws Exception {
        String topic = Broker.topic("key-shared");
        String[] keys = {"a", "b", "c", "d", "e", "f", "g", "h"};
        int perKey = 60;
        Map<String, Integer> highest = new HashMap<>();
        Set<String> seen = new HashSet<>();
        List<String> errors = new ArrayList<>();
        try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).enableBatching(false)
                        .create();
                Consumer<String> first = keyShared(topic)) {
            send(producer, keys, 0, 20);
            Consumer<String> second = keyShared(topic);
            drain(second, highest, seen, errors, Duration.ofMillis(300), false);
            send(producer, keys, 20, 40);
            drain(second, highest, seen, errors, Duration.ofMillis(300), true);
            second.close();
            Consumer<String> third = keyShared(topic);
            send(producer, keys, 40, perKey);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (seen.size() < keys.length * perKey && System.nanoTime() < deadline) {
                drain(first, highest, seen, errors, Duration.ofMillis(50), false);
                drain(third, highest, seen, errors, Duration.ofMillis(50), false);
            }
            third.close();
        }
        assertEquals(List.of(), errors);
        assertEquals(keys.length * perKey, seen.size());
    }

    private Consumer<String> keyShared(String topic) throws PulsarClientException {
        return client.newConsumer(Schema.STRING).topic(topic).subscriptionName("ks")
                .subscriptionType(SubscriptionType.Key_Shared).receiverQueueSize(10).subscribe();
    }

    private static void send(Producer<String> producer, String[] keys, int from, int to) throws Exception {
        for (int n = from; n < to; n++) {
            for (String key : keys) {
                producer.newMessage().key(key).value(Integer.toString(n)).sendAsync();
            }
        }
        producer.flush();
    }

    /** Receives what arrives within the wait; the last one is left unacknowledged when asked. */
    private static void drain(Consumer<String> consumer, Map<String, Integer> highest, Set<String> seen,
            List<String> errors, Duration wait, boolean leaveLastUnacked) throws PulsarClientException {
        Message<String> msg;
        while ((msg = consumer.receive((int) wait.toMillis(), TimeUnit.MILLISECONDS)) != null) {
            int n = Integer.parseInt(msg.getValue());
            String id = msg.getKey() + "/" + n;
            if (seen.add(id)) {
                Integer prev = highest.get(msg.getKey());
                if (prev != null && n <= prev) {
                    errors.add("key " + msg.getKey() + ": " + n + " after " + prev);
                }
                highest.put(msg.getKey(), n);
            }
            if (leaveLastUnacked) {
                return;
            }
            consumer.acknowledge(msg);
        }
    }
}
