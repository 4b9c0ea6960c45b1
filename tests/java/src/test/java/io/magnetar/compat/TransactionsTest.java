package io.magnetar.compat;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.PulsarClient;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Magnetar has no transactions: a client that enables them is told so at once, not left waiting. */
@Timeout(30)
class TransactionsTest {
    @Test
    void aTransactionalClientGetsAClearErrorAtOnce() {
        long start = System.nanoTime();
        Exception refused = assertThrows(Exception.class, () -> {
            try (PulsarClient client = PulsarClient.builder().serviceUrl(Broker.serviceUrl())
                    .operationTimeout(20, TimeUnit.SECONDS).enableTransaction(true).build()) {
                client.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build().get();
            }
        });
        long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        // a client left waiting would fail only at its 20 s operation timeout
        assertTrue(tookMs < 10_000, "the error took " + tookMs + " ms");
        String text = String.valueOf(refused.getMessage()) + " " + refused.getCause();
        assertTrue(text.toLowerCase().contains("transaction"), text);
    }
}
