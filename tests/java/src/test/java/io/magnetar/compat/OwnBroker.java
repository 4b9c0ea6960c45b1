package io.magnetar.compat;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** A broker process of a test's own (for restarts): `python -m magnetar.cli standalone`. */
final class OwnBroker implements AutoCloseable {
    final Path dataDir;
    final Path log;
    final int port = freePort();
    final int webPort = freePort();
    private final Map<String, String> settings;
    private Process process;

    OwnBroker(Path dir, Map<String, String> settings) throws IOException {
        Files.createDirectories(dir);
        this.dataDir = dir.resolve("data");
        this.log = dir.resolve("broker.log");
        this.settings = settings;
    }

    String serviceUrl() {
        return "pulsar://127.0.0.1:" + port;
    }

    OwnBroker start() throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Broker.env("MAGNETAR_PYTHON"), "-m", "magnetar.cli", "standalone",
                "--data-dir", dataDir.toString(), "--set", "brokerServicePort=" + port,
                "--set", "webServicePort=" + webPort, "--set", "bindAddress=127.0.0.1",
                "--set", "advertisedAddress=127.0.0.1"));
        settings.forEach((k, v) -> cmd.addAll(List.of("--set", k + "=" + v)));
        long logStart = Files.exists(log) ? Files.size(log) : 0;
        ProcessBuilder builder = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
        builder.environment().put("PYTHONUNBUFFERED", "1");
        process = builder.start();
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                throw new IllegalStateException("broker exited: " + Files.readString(log));
            }
            String text = Files.readString(log);
            if (text.substring((int) logStart).contains("magnetar standalone ready")) {
                return this;
            }
            Thread.sleep(50);
        }
        throw new IllegalStateException("broker not ready after 30 s: " + Files.readString(log));
    }

    /** SIGKILL: the crash path. */
    void kill() throws InterruptedException {
        if (process != null && process.isAlive()) {
            process.destroyForcibly().waitFor();
        }
    }

    @Override
    public void close() throws InterruptedException {
        kill();
    }

    private static int freePort() {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }
}
