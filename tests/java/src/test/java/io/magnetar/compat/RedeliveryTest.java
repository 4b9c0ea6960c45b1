package io.magnetar.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.DeadLetterPolicy;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Negative acks, ack timeout, retry and dead-letter topics, deliverAfter / deliverAt. */
@Timeout(60)
class RedeliveryTest extends ClientTests {

    @Test
    void negativeAckRedelivers() throws Exception {
        String topic = Broker.topic("nack");
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                        .subscriptionType(SubscriptionType.Shared)
                        .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS).subscribe();
                Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
            producer.send("again");
            Message<String> first = consumer.receive(5, TimeUnit.SECONDS);
            assertEquals(0, first.getRedeliveryCount());
            consumer.negativeAcknowledge(first);
            Message<String> second = consumer.receive(5, TimeUnit.SECONDS);
            assertEquals("again", second.getValue());
            assertEquals(first.getMessageId(), second.getMessageId());
            assertEquals(1, second.getRedeliveryCount());
            consumer.acknowledge(second);
            Broker.expectNothing(consumer, Duration.ofMillis(400));
        }
    }

    @Test
    void ackTimeoutRedelivers() throws Exception {
        String topic = Broker.topic("ack-timeout");
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                        .subscriptionType(SubscriptionType.Shared).ackTimeout(1, TimeUnit.SECONDS)
                        .ackTimeoutTickTime(100, TimeUnit.MILLISECONDS).subscribe();
                Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
            producer.send("unacked");
            Message<String> first = consumer.receive(5, TimeUnit.SECONDS);
            long received = System.nanoTime();
            Message<String> second = consumer.receive(5, TimeUnit.SECONDS);
            assertEquals("unacked", second.getValue());
            assertEquals(first.getMessageId(), second.getMessageId());
            assertTrue(System.nanoTime() - received >= TimeUnit.MILLISECONDS.toNanos(900));
            assertEquals(1, second.getRedeliveryCount());
            consumer.acknowledge(second);
        }
    }

    @Test
    void deadLetterTopicAfterMaxRedeliveries() throws Exception {
        String topic = Broker.topic("dlq");
        String dlq = topic + "-my-dlq";
        try (Consumer<String> dead = client.newConsumer(Schema.STRING).topic(dlq).subscriptionName("d")
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
                Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                        .subscriptionType(SubscriptionType.Shared)
                        .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                        .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2).deadLetterTopic(dlq).build())
                        .subscribe();
                Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
            producer.newMessage().key("k").property("p", "v").value("poison").send();
            for (int attempt = 0; attempt <= 2; attempt++) {
                Message<String> m = consumer.receive(5, TimeUnit.SECONDS);
                assertEquals(attempt, m.getRedeliveryCount());
                consumer.negativeAcknowledge(m);
            }
            Message<String> got = Broker.receive(dead, 1).get(0);
            assertEquals("poison", got.getValue());
            assertEquals("k", got.getKey());
            assertEquals("v", got.getProperty("p"));
            assertTrue(got.getProperties().containsKey("REAL_TOPIC"), got.getProperties().toString());
            Broker.expectNothing(consumer, Duration.ofMillis(400));
        }
    }

    @Test
    void retryLetterTopicWithReconsumeLater() throws Exception {
        String topic = Broker.topic("retry");
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                        .subscriptionType(SubscriptionType.Shared).enableRetry(true)
                        .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2)
                                .retryLetterTopic(topic + "-retry").deadLetterTopic(topic + "-dead").build())
                        .subscribe();
                Consumer<String> dead = client.newConsumer(Schema.STRING).topic(topic + "-dead")
                        .subscriptionName("d").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                        .subscribe();
                Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
            producer.send("later");
            Message<String> m = consumer.receive(5, TimeUnit.SECONDS);
            for (int attempt = 1; attempt <= 2; attempt++) {
                consumer.reconsumeLater(m, 200, TimeUnit.MILLISECONDS);
                m = consumer.receive(5, TimeUnit.SECONDS);
                assertEquals("later", m.getValue());
                assertEquals(Integer.toString(attempt), m.getProperty("RECONSUMETIMES"));
                assertEquals(topic + "-retry", m.getTopicName());
            }
            consumer.reconsumeLater(m, 200, TimeUnit.MILLISECONDS);
            assertEquals("later", Broker.receive(dead, 1).get(0).getValue());
        }
    }

    @Test
    void deliverAfterAndDeliverAt() throws Exception {
        String topic = Broker.topic("delayed");
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                        .subscriptionType(SubscriptionType.Shared).subscribe()) {
            // Pulsar delivers a message less than a tick before its time: a 100 ms tick for this topic
            admin.topicPolicies().setDelayedDeliveryPolicy(topic,
                    org.apache.pulsar.common.policies.data.DelayedDeliveryPolicies.builder().active(true)
                            .tickTime(100).build());
            try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
                long sent = System.currentTimeMillis();
                producer.newMessage().value("after").deliverAfter(1500, TimeUnit.MILLISECONDS).send();
                producer.newMessage().value("at").deliverAt(sent + 800).send();
                producer.send("now");
                List<Message<String>> got = Broker.receive(consumer, 3);
                assertEquals(List.of("now", "at", "after"), got.stream().map(Message::getValue).toList());
                assertTrue(System.currentTimeMillis() - sent >= 1400);
            }
        }
    }
}
