package io.magnetar.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.BatcherBuilder;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.impl.BatchMessageIdImpl;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** Batching (default and key-based), chunking and compression. */
@Timeout(60)
class PayloadsTest extends ClientTests {

    private static List<Message<String>> sendBatched(BatcherBuilder builder, String topic, SubscriptionType type)
            throws Exception {
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                        .subscriptionType(type).subscribe();
                Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).batcherBuilder(builder)
                        .batchingMaxMessages(50).batchingMaxPublishDelay(50, TimeUnit.MILLISECONDS).create()) {
            CompletableFuture<?>[] sends = new CompletableFuture<?>[200];
            for (int i = 0; i < 200; i++) {
                sends[i] = producer.newMessage().key("k" + (i % 3)).value("m-" + i).sendAsync();
            }
            CompletableFuture.allOf(sends).get(10, TimeUnit.SECONDS);
            List<Message<String>> got = Broker.receive(consumer, 200);
            Broker.expectNothing(consumer, Duration.ofMillis(200));
            return got;
        }
    }

    @Test
    void defaultBatching() throws Exception {
        List<Message<String>> got = sendBatched(BatcherBuilder.DEFAULT, Broker.topic("batch"), SubscriptionType.Shared);
        for (int i = 0; i < 200; i++) {
            assertEquals("m-" + i, got.get(i).getValue());
        }
        assertTrue(got.stream().anyMatch(m -> m.getMessageId() instanceof BatchMessageIdImpl b && b.getBatchSize() > 1),
                "no message arrived in a batch");
    }

    @Test
    void keyBasedBatchingKeepsEachBatchToOneKey() throws Exception {
        List<Message<String>> got = sendBatched(BatcherBuilder.KEY_BASED, Broker.topic("key-batch"),
                SubscriptionType.Key_Shared);
        Map<String, Integer> last = new HashMap<>();
        Map<String, String> keyOfEntry = new HashMap<>();
        for (Message<String> m : got) {
            int i = Integer.parseInt(m.getValue().substring(2));
            assertEquals("k" + (i % 3), m.getKey());
            Integer prev = last.put(m.getKey(), i);
            assertTrue(prev == null || prev < i, "key " + m.getKey() + ": " + i + " after " + prev);
            BatchMessageIdImpl id = (BatchMessageIdImpl) m.getMessageId();
            String entry = id.getLedgerId() + ":" + id.getEntryId();
            String other = keyOfEntry.putIfAbsent(entry, m.getKey());
            assertTrue(other == null || other.equals(m.getKey()), "one batch holds keys " + other + " and " + m.getKey());
        }
    }

    @Test
    void chunkedMessagesAreReassembled() throws Exception {
        String topic = Broker.topic("chunks");
        byte[] big = new byte[300 * 1024];
        new Random(7).nextBytes(big);
        try (Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("s").subscribe();
                Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false)
                        .enableChunking(true).chunkMaxMessageSize(64 * 1024).create()) {
            producer.send(big);
            producer.send("small".getBytes());
            List<Message<byte[]>> got = Broker.receive(consumer, 2);
            assertArrayEquals(big, got.get(0).getData());
            assertEquals("small", new String(got.get(1).getData()));
            assertTrue(got.get(0).getMessageId().getClass().getSimpleName().contains("Chunk"),
                    "id of a chunked message: " + got.get(0).getMessageId().getClass());
        }
    }

    @ParameterizedTest
    @EnumSource(value = CompressionType.class, names = {"LZ4", "ZLIB", "ZSTD", "SNAPPY"})
    void everyCompressionCodec(CompressionType codec) throws Exception {
        String topic = Broker.topic("codec-" + codec);
        String text = "compressible ".repeat(500);
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                        .subscribe();
                Producer<String> single = client.newProducer(Schema.STRING).topic(topic).compressionType(codec)
                        .enableBatching(false).create();
                Producer<String> batched = client.newProducer(Schema.STRING).topic(topic).compressionType(codec)
                        .batchingMaxPublishDelay(20, TimeUnit.MILLISECONDS).create()) {
            single.send(text);
            CompletableFuture<?>[] sends = new CompletableFuture<?>[10];
            for (int i = 0; i < 10; i++) {
                sends[i] = batched.sendAsync(text + i);
            }
            CompletableFuture.allOf(sends).get(10, TimeUnit.SECONDS);
            List<Message<String>> got = Broker.receive(consumer, 11);
            assertEquals(text, got.get(0).getValue());
            for (int i = 0; i < 10; i++) {
                assertEquals(text + i, got.get(i + 1).getValue());
            }
        }
        var stats = admin.topics().getStats(topic);
        assertTrue(stats.getBytesInCounter() < 11 * text.length(),
                "bytes in " + stats.getBytesInCounter() + ": the payloads were not compressed");
    }
}
