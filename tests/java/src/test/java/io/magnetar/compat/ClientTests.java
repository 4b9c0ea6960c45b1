package io.magnetar.compat;

import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.PulsarClient;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/** A client and an admin client on the plain broker, for each test class in turn. */
abstract class ClientTests {
    static PulsarClient client;
    static PulsarAdmin admin;

    @BeforeAll
    static void open() throws Exception {
        client = Broker.client();
        admin = Broker.admin();
    }

    @AfterAll
    static void close() throws Exception {
        if (client != null) {
            client.close();
        }
        if (admin != null) {
            admin.close();
        }
    }
}
