package io.magnetar.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.LongRunningProcessStatus;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.TableView;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A TableView over a compacted topic, and a readCompacted reader. */
@Timeout(60)
class TableViewTest {
    private static Map<String, String> toMap(TableView<String> table) {
        Map<String, String> out = new java.util.HashMap<>();
        table.forEach(out::put);
        return out;
    }

    @Test
    void tableViewOverACompactedTopic() throws Exception {
        String topic = Broker.topic("table");
        try (PulsarClient client = Broker.client(); PulsarAdmin admin = Broker.admin()) {
            try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).enableBatching(false)
                    .create()) {
                for (int round = 0; round < 3; round++) {
                    for (String key : new String[] {"a", "b", "c"}) {
                        producer.newMessage().key(key).value(key + round).send();
                    }
                }
                producer.newMessage().key("c").value(null).send(); // a tombstone deletes c
                admin.topics().triggerCompaction(topic);
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                LongRunningProcessStatus status;
                do {
                    status = admin.topics().compactionStatus(topic);
                    if (status.status == LongRunningProcessStatus.Status.RUNNING) {
                        Thread.sleep(50);
                    }
                } while (status.status == LongRunningProcessStatus.Status.RUNNING && System.nanoTime() < deadline);
                assertEquals(LongRunningProcessStatus.Status.SUCCESS, status.status, status.lastError);
                producer.newMessage().key("d").value("d0").send(); // after the compaction horizon
            }
            try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic).readCompacted(true)
                    .startMessageId(MessageId.earliest).create()) {
                StringBuilder seen = new StringBuilder();
                Message<String> m;
                while ((m = reader.readNext(500, TimeUnit.MILLISECONDS)) != null) {
                    seen.append(m.getKey()).append('=').append(m.getValue()).append(' ');
                }
                assertEquals("a=a2 b=b2 d=d0 ", seen.toString());
            }
            try (TableView<String> table = client.newTableView(Schema.STRING).topic(topic).create()) {
                assertEquals(Map.of("a", "a2", "b", "b2", "d", "d0"), toMap(table));
            }
        }
    }
}
