package io.magnetar.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Deduplication by producer name and sequence id, on a live broker and across a broker crash. */
@Timeout(90)
class DeduplicationTest {
    private static Producer<String> producer(PulsarClient client, String topic) throws Exception {
        return client.newProducer(Schema.STRING).topic(topic).producerName("java-dedup").enableBatching(false)
                .sendTimeout(0, TimeUnit.SECONDS).create();
    }

    @Test
    void repeatsOfASequenceIdAreDropped() throws Exception {
        String ns = "public/dedup-" + System.nanoTime();
        String topic = "persistent://" + ns + "/t";
        try (PulsarAdmin admin = Broker.admin(); PulsarClient client = Broker.client()) {
            admin.namespaces().createNamespace(ns);
            admin.namespaces().setDeduplicationStatus(ns, true);
            try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                    .subscribe()) {
                try (Producer<String> p = producer(client, topic)) {
                    assertEquals(-1, p.getLastSequenceId());
                    p.newMessage().sequenceId(10).value("ten").send();
                    MessageId repeat = p.newMessage().sequenceId(10).value("ten again").send();
                    p.newMessage().sequenceId(5).value("older").send();
                    p.newMessage().sequenceId(11).value("eleven").send();
                    assertTrue(repeat != null);
                }
                try (Producer<String> again = producer(client, topic)) {
                    assertEquals(11, again.getLastSequenceId());
                    again.send("twelve"); // the client numbers on from the broker's last sequence id
                    assertEquals(12, again.getLastSequenceId());
                }
                List<Message<String>> got = Broker.receive(consumer, 3);
                assertEquals(List.of("ten", "eleven", "twelve"), got.stream().map(Message::getValue).toList());
                assertEquals(12, got.get(2).getSequenceId());
                Broker.expectNothing(consumer, Duration.ofMillis(300));
            }
        }
    }

    @Test
    void noDuplicateAcrossABrokerCrash() throws Exception {
        String topic = "persistent://public/default/dedup-restart";
        try (OwnBroker broker = new OwnBroker(Broker.scratch().resolve("dedup-restart"),
                Map.of("brokerDeduplicationEnabled", "true"))) {
            broker.start();
            try (PulsarClient client = Broker.client(broker.serviceUrl()); Producer<String> p = producer(client, topic)) {
                for (long seq = 0; seq < 5; seq++) {
                    p.newMessage().sequenceId(seq).value("m-" + seq).send();
                }
            }
            broker.kill();
            broker.start();
            try (PulsarClient client = Broker.client(broker.serviceUrl())) {
                try (Producer<String> p = producer(client, topic)) {
                    assertEquals(4, p.getLastSequenceId());
                    for (long seq = 3; seq < 7; seq++) { // a retry of 3 and 4 after the crash, then new ones
                        p.newMessage().sequenceId(seq).value("m-" + seq).send();
                    }
                }
                try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic)
                        .startMessageId(MessageId.earliest).create()) {
                    StringBuilder seen = new StringBuilder();
                    Message<String> m;
                    while ((m = reader.readNext(500, TimeUnit.MILLISECONDS)) != null) {
                        seen.append(m.getValue()).append(' ');
                    }
                    assertEquals("m-0 m-1 m-2 m-3 m-4 m-5 m-6 ", seen.toString());
                }
            }
        }
    }
}
