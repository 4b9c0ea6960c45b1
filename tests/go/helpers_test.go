// Package compat runs the official Go client against a Magnetar broker. The broker's
// addresses come from MAGNETAR_SERVICE_URL and MAGNETAR_WEB_URL (tests/clients/test_go_client.py
// starts a broker and sets them); without them the tests are skipped.
package compat

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
)

func serviceURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("MAGNETAR_SERVICE_URL")
	if url == "" {
		t.Skip("MAGNETAR_SERVICE_URL is not set: start a broker (./bin/magnetar standalone) and set it")
	}
	return url
}

func webURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("MAGNETAR_WEB_URL")
	if url == "" {
		t.Skip("MAGNETAR_WEB_URL is not set")
	}
	return url
}

func newClient(t *testing.T) pulsar.Client {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:              serviceURL(t),
		OperationTimeout: 10 * time.Second,
		Logger:           plog.NewLoggerWithSlog(logger),
	})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(client.Close)
	return client
}

func newTopic(name string) string {
	return fmt.Sprintf("persistent://public/default/go-%s-%d", name, rand.Int63())
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// adminPost sends a JSON body to the broker's admin API and fails the test on an error status.
func adminPost(t *testing.T, path, body string) {
	t.Helper()
	resp, err := http.Post(webURL(t)+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("POST %s: status %d", path, resp.StatusCode)
	}
}

func receiveN(t *testing.T, c pulsar.Consumer, n int, timeout time.Duration) []pulsar.Message {
	t.Helper()
	ctx := ctxTimeout(t, timeout)
	out := make([]pulsar.Message, 0, n)
	for len(out) < n {
		msg, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(out), n, err)
		}
		if err := c.Ack(msg); err != nil {
			t.Fatalf("ack: %v", err)
		}
		out = append(out, msg)
	}
	return out
}

// expectNothing checks that no message arrives within the given time.
func expectNothing(t *testing.T, c pulsar.Consumer, wait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if msg, err := c.Receive(ctx); err == nil {
		t.Fatalf("unexpected message %q", msg.Payload())
	}
}
