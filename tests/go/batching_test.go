package compat

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

func sendBatch(t *testing.T, producer pulsar.Producer, n int, key func(int) string) {
	t.Helper()
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		producer.SendAsync(ctxTimeout(t, 10*time.Second), &pulsar.ProducerMessage{
			Payload: []byte(fmt.Sprintf("m-%d", i)), Key: key(i)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			errs <- err
		})
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}

func TestBatching(t *testing.T) {
	for name, builder := range map[string]pulsar.BatcherBuilderType{
		"default": pulsar.DefaultBatchBuilder, "key-based": pulsar.KeyBasedBatchBuilder} {
		t.Run(name, func(t *testing.T) {
			client := newClient(t)
			topic := newTopic("batch-" + name)
			consumer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
				Type: pulsar.KeyShared, EnableBatchIndexAcknowledgment: true})
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			defer consumer.Close()
			producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatcherBuilderType: builder,
				BatchingMaxMessages: 50, BatchingMaxPublishDelay: 50 * time.Millisecond})
			if err != nil {
				t.Fatalf("producer: %v", err)
			}
			defer producer.Close()
			sendBatch(t, producer, 200, func(i int) string { return fmt.Sprintf("k%d", i%3) })
			batched := 0
			perKey := map[string]int{}
			for _, msg := range receiveN(t, consumer, 200, 15*time.Second) {
				if msg.ID().BatchSize() > 1 {
					batched++
				}
				var i int
				fmt.Sscanf(string(msg.Payload()), "m-%d", &i)
				if want := fmt.Sprintf("k%d", i%3); msg.Key() != want {
					t.Fatalf("message %d has key %q", i, msg.Key())
				}
				if prev, ok := perKey[msg.Key()]; ok && i <= prev {
					t.Fatalf("key %s: %d after %d", msg.Key(), i, prev)
				}
				perKey[msg.Key()] = i
			}
			if batched == 0 {
				t.Fatal("no message arrived in a batch")
			}
		})
	}
}
