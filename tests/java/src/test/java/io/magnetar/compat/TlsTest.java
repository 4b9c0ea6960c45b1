package io.magnetar.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Authentication;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.impl.auth.AuthenticationTls;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** TLS with token authentication, and TLS with client certificates (mTLS). */
@Timeout(60)
class TlsTest {
    private static PulsarClient client(String url, Authentication auth) throws PulsarClientException {
        // without credentials the client retries until this timeout: it bounds those cases
        var builder = PulsarClient.builder().serviceUrl(url).tlsTrustCertsFilePath(Broker.env("MAGNETAR_TLS_CA"))
                .operationTimeout(auth == null ? 2 : 10, TimeUnit.SECONDS);
        if (auth != null) {
            builder.authentication(auth);
        }
        return builder.build();
    }

    private static void roundTrip(PulsarClient client) throws Exception {
        String topic = Broker.topic("tls");
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
                        .subscribe();
                Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
            producer.send("encrypted");
            assertEquals("encrypted", Broker.receive(consumer, 1).get(0).getValue());
        }
    }

    @Test
    void tokenOverTls() throws Exception {
        String url = Broker.env("MAGNETAR_TOKEN_URL");
        try (PulsarClient client = client(url, AuthenticationFactory.token(Broker.env("MAGNETAR_TOKEN")))) {
            roundTrip(client);
        }
        try (PulsarClient client = client(url, AuthenticationFactory.token("not-a-token"))) {
            assertThrows(PulsarClientException.AuthenticationException.class,
                    () -> client.newProducer().topic(Broker.topic("refused")).create());
        }
        try (PulsarClient client = client(url, null)) {
            assertThrows(PulsarClientException.class, () -> client.newProducer().topic(Broker.topic("none")).create());
        }
        String web = Broker.env("MAGNETAR_TOKEN_WEB_URL");
        try (PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(web)
                .tlsTrustCertsFilePath(Broker.env("MAGNETAR_TLS_CA"))
                .authentication(AuthenticationFactory.token(Broker.env("MAGNETAR_TOKEN"))).build()) {
            assertTrue(admin.tenants().getTenants().contains("public"));
        }
        try (PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(web)
                .tlsTrustCertsFilePath(Broker.env("MAGNETAR_TLS_CA")).build()) {
            assertThrows(PulsarAdminException.NotAuthorizedException.class, () -> admin.tenants().getTenants());
        }
    }

    @Test
    void clientCertificates() throws Exception {
        String url = Broker.env("MAGNETAR_MTLS_URL");
        try (PulsarClient client = client(url,
                new AuthenticationTls(Broker.env("MAGNETAR_CLIENT_CERT"), Broker.env("MAGNETAR_CLIENT_KEY")))) {
            roundTrip(client);
        }
        try (PulsarClient client = client(url,
                new AuthenticationTls(Broker.env("MAGNETAR_OTHER_CERT"), Broker.env("MAGNETAR_OTHER_KEY")))) {
            // a trusted certificate of a role that may not produce on the topic
            assertThrows(PulsarClientException.AuthorizationException.class,
                    () -> client.newProducer().topic(Broker.topic("not-allowed")).create());
        }
        try (PulsarClient client = client(url, null)) {
            assertThrows(PulsarClientException.class, () -> client.newProducer().topic(Broker.topic("no-cert")).create());
        }
    }
}
