package io.magnetar.compat;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.junit.jupiter.api.Assumptions;

/**
 * Addresses of the brokers the test run started (tests/clients/client_suites.py sets them in
 * MAGNETAR_* environment variables), and clients on them.
 */
final class Broker {
    private Broker() {}

    static String env(String name) {
        String value = System.getenv(name);
        Assumptions.assumeTrue(value != null && !value.isEmpty(),
                name + " is not set: run this suite through ./bin/test tests/clients/test_java_client.py");
        return value;
    }

    static String serviceUrl() {
        return env("MAGNETAR_SERVICE_URL");
    }

    static String webUrl() {
        return env("MAGNETAR_WEB_URL");
    }

    static PulsarClient client() throws PulsarClientException {
        return client(serviceUrl());
    }

    static PulsarClient client(String url) throws PulsarClientException {
        return PulsarClient.builder().serviceUrl(url).operationTimeout(10, TimeUnit.SECONDS).build();
    }

    static PulsarAdmin admin() throws PulsarClientException {
        return PulsarAdmin.builder().serviceHttpUrl(webUrl()).requestTimeout(10, TimeUnit.SECONDS).build();
    }

    static String topic(String name) {
        return "persistent://public/default/java-" + name + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    static Path scratch() {
        return Path.of(env("MAGNETAR_SCRATCH"));
    }

    /** Receives n messages (each within the timeout) and acknowledges them. */
    static <T> List<Message<T>> receive(Consumer<T> consumer, int n, Duration timeout) throws PulsarClientException {
        List<Message<T>> out = new ArrayList<>();
        while (out.size() < n) {
            Message<T> msg = consumer.receive((int) timeout.toMillis(), TimeUnit.MILLISECONDS);
            if (msg == null) {
                throw new AssertionError("received " + out.size() + " of " + n + " messages");
            }
            consumer.acknowledge(msg);
            out.add(msg);
        }
        return out;
    }

    static <T> List<Message<T>> receive(Consumer<T> consumer, int n) throws PulsarClientException {
        return receive(consumer, n, Duration.ofSeconds(10));
    }

    /** Fails when a message arrives within the given time. */
    static <T> void expectNothing(Consumer<T> consumer, Duration wait) throws PulsarClientException {
        Message<T> msg = consumer.receive((int) wait.toMillis(), TimeUnit.MILLISECONDS);
        if (msg != null) {
            throw new AssertionError("unexpected message " + new String(msg.getData()));
        }
    }
}
