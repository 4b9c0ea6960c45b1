package io.magnetar.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Readers from earliest, latest and a message id; seek by id and by time. */
@Timeout(60)
class ReadersTest extends ClientTests {

    private static List<MessageId> publish(String topic, int from, int to) throws Exception {
        List<MessageId> ids = new ArrayList<>();
        try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).enableBatching(false)
                .create()) {
            for (int i = from; i < to; i++) {
                ids.add(producer.send("m-" + i));
            }
        }
        return ids;
    }

    private static List<String> readAll(Reader<String> reader) throws Exception {
        List<String> out = new ArrayList<>();
        Message<String> msg;
        while ((msg = reader.readNext(300, TimeUnit.MILLISECONDS)) != null) {
            out.add(msg.getValue());
        }
        return out;
    }

    @Test
    void readersFromEarliestLatestAndAMessageId() throws Exception {
        String topic = Broker.topic("readers");
        List<MessageId> ids = publish(topic, 0, 5);
        try (Reader<String> earliest = client.newReader(Schema.STRING).topic(topic)
                        .startMessageId(MessageId.earliest).create();
                Reader<String> latest = client.newReader(Schema.STRING).topic(topic)
                        .startMessageId(MessageId.latest).create();
                Reader<String> fromId = client.newReader(Schema.STRING).topic(topic).startMessageId(ids.get(2))
                        .create();
                Reader<String> fromIdInclusive = client.newReader(Schema.STRING).topic(topic)
                        .startMessageId(ids.get(2)).startMessageIdInclusive().create()) {
            assertEquals(List.of("m-0", "m-1", "m-2", "m-3", "m-4"), readAll(earliest));
            assertEquals(List.of("m-3", "m-4"), readAll(fromId));
            assertEquals(List.of("m-2", "m-3", "m-4"), readAll(fromIdInclusive));
            assertFalse(latest.hasMessageAvailable());
            publish(topic, 5, 6);
            assertEquals(List.of("m-5"), readAll(latest));
        }
    }

    @Test
    void readerOfLatestInclusiveGetsTheLastMessage() throws Exception {
        String topic = Broker.topic("latest-inclusive");
        publish(topic, 0, 3);
        try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic).startMessageId(MessageId.latest)
                .startMessageIdInclusive().create()) {
            // the Java client seeks to the last message when asked whether one is available
            assertTrue(reader.hasMessageAvailable());
            assertEquals(List.of("m-2"), readAll(reader));
        }
    }

    /** A time after the given message's publish time, once the clock has passed it. */
    private static long nextMillisecond(MessageId id, String topic) throws Exception {
        long published;
        try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic).startMessageId(id)
                .startMessageIdInclusive().create()) {
            published = reader.readNext(5, TimeUnit.SECONDS).getPublishTime();
        }
        while (System.currentTimeMillis() <= published + 1) {
            Thread.onSpinWait();
        }
        return published + 1;
    }

    @Test
    void seekByMessageIdAndByTime() throws Exception {
        String topic = Broker.topic("seek");
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                .subscribe()) {
            List<MessageId> ids = publish(topic, 0, 3);
            long between = nextMillisecond(ids.get(2), topic);
            publish(topic, 3, 6);
            List<Message<String>> all = Broker.receive(consumer, 6);
            assertEquals("m-5", all.get(5).getValue());
            // the broker resets to the id; the Java client drops the entry it sought to (unlike a
            // reader with startMessageIdInclusive), so the next message is the one after it
            consumer.seek(ids.get(1));
            assertEquals("m-2", Broker.receive(consumer, 1).get(0).getValue());
            consumer.seek(between);
            assertEquals("m-3", Broker.receive(consumer, 1).get(0).getValue());
            consumer.seek(MessageId.earliest);
            assertEquals("m-0", Broker.receive(consumer, 1).get(0).getValue());
        }
        try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic).startMessageId(MessageId.latest)
                .create()) {
            assertNull(reader.readNext(200, TimeUnit.MILLISECONDS));
            reader.seek(0L);
            assertEquals("m-0", reader.readNext(5, TimeUnit.SECONDS).getValue());
        }
    }
}
