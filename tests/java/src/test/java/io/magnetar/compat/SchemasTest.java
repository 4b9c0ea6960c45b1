package io.magnetar.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Timestamp;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.common.schema.KeyValue;
import org.apache.pulsar.common.schema.KeyValueEncodingType;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Schema.AVRO, JSON, PROTOBUF_NATIVE, primitives and KeyValue; incompatible producers refused. */
@Timeout(60)
class SchemasTest extends ClientTests {

    public static class User {
        public String name;
        public int age;

        public User() {}

        User(String name, int age) {
            this.name = name;
            this.age = age;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof User u && Objects.equals(u.name, name) && u.age == age;
        }

        @Override
        public int hashCode() {
            return Objects.hash(name, age);
        }
    }

    /** The same record without the age and with a field that has no default. */
    public static class Other {
        public String email;
    }

    private static <T> T roundTrip(String topic, Schema<T> schema, T value) throws Exception {
        try (Consumer<T> consumer = client.newConsumer(schema).topic(topic).subscriptionName("s").subscribe();
                Producer<T> producer = client.newProducer(schema).topic(topic).create()) {
            producer.send(value);
            Message<T> msg = consumer.receive(10, TimeUnit.SECONDS);
            consumer.acknowledge(msg);
            return msg.getValue();
        }
    }

    @Test
    void avro() throws Exception {
        String topic = Broker.topic("avro");
        assertEquals(new User("ada", 36), roundTrip(topic, Schema.AVRO(User.class), new User("ada", 36)));
        SchemaInfo info = admin.schemas().getSchemaInfo(topic);
        assertEquals(SchemaType.AVRO, info.getType());
        assertTrue(info.getSchemaDefinition().contains("\"age\""), info.getSchemaDefinition());
        PulsarClientException refused = assertThrows(PulsarClientException.IncompatibleSchemaException.class,
                () -> client.newProducer(Schema.AVRO(Other.class)).topic(topic).create());
        assertTrue(refused.getMessage().contains("email"), refused.getMessage());
    }

    @Test
    void json() throws Exception {
        String topic = Broker.topic("json");
        assertEquals(new User("bob", 7), roundTrip(topic, Schema.JSON(User.class), new User("bob", 7)));
        assertEquals(SchemaType.JSON, admin.schemas().getSchemaInfo(topic).getType());
        assertThrows(PulsarClientException.IncompatibleSchemaException.class,
                () -> client.newProducer(Schema.JSON(Other.class)).topic(topic).create());
        assertThrows(PulsarClientException.IncompatibleSchemaException.class,
                () -> client.newProducer(Schema.AVRO(User.class)).topic(topic).create());
    }

    @Test
    void protobufNative() throws Exception {
        String topic = Broker.topic("protobuf-native");
        Timestamp value = Timestamp.newBuilder().setSeconds(1_700_000_000L).setNanos(42).build();
        assertEquals(value, roundTrip(topic, Schema.PROTOBUF_NATIVE(Timestamp.class), value));
        assertEquals(SchemaType.PROTOBUF_NATIVE, admin.schemas().getSchemaInfo(topic).getType());
        assertThrows(PulsarClientException.IncompatibleSchemaException.class,
                () -> client.newProducer(Schema.AVRO(User.class)).topic(topic).create());
    }

    @Test
    void primitives() throws Exception {
        assertEquals("text", roundTrip(Broker.topic("string"), Schema.STRING, "text"));
        assertEquals(Long.MIN_VALUE, roundTrip(Broker.topic("int64"), Schema.INT64, Long.MIN_VALUE));
        assertEquals(-7, roundTrip(Broker.topic("int32"), Schema.INT32, -7));
        assertEquals(2.5, roundTrip(Broker.topic("double"), Schema.DOUBLE, 2.5));
        assertEquals(true, roundTrip(Broker.topic("bool"), Schema.BOOL, true));
        assertArrayEquals(new byte[] {1, 2}, roundTrip(Broker.topic("bytes"), Schema.BYTES, new byte[] {1, 2}));
        String topic = Broker.topic("typed");
        roundTrip(topic, Schema.INT64, 1L);
        assertThrows(PulsarClientException.IncompatibleSchemaException.class,
                () -> client.newProducer(Schema.STRING).topic(topic).create());
    }

    @Test
    void keyValueInlineAndSeparated() throws Exception {
        for (KeyValueEncodingType encoding : KeyValueEncodingType.values()) {
            String topic = Broker.topic("kv-" + encoding);
            Schema<KeyValue<String, User>> schema = Schema.KeyValue(Schema.STRING, Schema.JSON(User.class), encoding);
            KeyValue<String, User> got = roundTrip(topic, schema, new KeyValue<>("key", new User("kv", 1)));
            assertEquals("key", got.getKey());
            assertEquals(new User("kv", 1), got.getValue());
            assertEquals(SchemaType.KEY_VALUE, admin.schemas().getSchemaInfo(topic).getType());
        }
    }
}
