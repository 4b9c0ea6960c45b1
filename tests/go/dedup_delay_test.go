package compat

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

func TestDeduplicationBySequenceID(t *testing.T) {
	client := newClient(t)
	topic := newTopic("dedup")
	path := "/admin/v2/persistent/" + strings.TrimPrefix(topic, "persistent://") + "/deduplicationEnabled"
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer consumer.Close()
	adminPost(t, path, "true")
	send := func(seq int64, body string) pulsar.MessageID {
		producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "go-dedup",
			DisableBatching: true})
		if err != nil {
			t.Fatalf("producer: %v", err)
		}
		defer producer.Close()
		id, err := producer.Send(ctxTimeout(t, 10*time.Second), &pulsar.ProducerMessage{
			Payload: []byte(body), SequenceID: &seq})
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		return id
	}
	send(100, "hundred")
	send(100, "hundred again")
	send(99, "older")
	send(101, "next")
	got := receiveN(t, consumer, 2, 5*time.Second)
	if string(got[0].Payload()) != "hundred" || string(got[1].Payload()) != "next" {
		t.Fatalf("got %q, %q", got[0].Payload(), got[1].Payload())
	}
	expectNothing(t, consumer, 300*time.Millisecond)
}

// Pulsar delivers a delayed message once its time is less than a tick ahead (the broker's
// isDelayedDeliveryDeliverAtTimeStrict is false): the topic gets a 100 ms tick.
func TestDelayedDelivery(t *testing.T) {
	client := newClient(t)
	topic := newTopic("delayed")
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer consumer.Close()
	adminPost(t, "/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/delayedDelivery",
		`{"active": true, "tickTime": 100}`)
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer producer.Close()
	sent := time.Now()
	for _, msg := range []*pulsar.ProducerMessage{
		{Payload: []byte("after"), DeliverAfter: 1500 * time.Millisecond},
		{Payload: []byte("at"), DeliverAt: sent.Add(800 * time.Millisecond)},
		{Payload: []byte("now")},
	} {
		if _, err := producer.Send(ctxTimeout(t, 10*time.Second), msg); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	ctx := ctxTimeout(t, 10*time.Second)
	earliest := map[string]time.Duration{"now": 0, "at": 700 * time.Millisecond, "after": 1400 * time.Millisecond}
	var order []string
	for len(order) < 3 {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("received %v: %v", order, err)
		}
		_ = consumer.Ack(msg)
		name := string(msg.Payload())
		if elapsed := time.Since(sent); elapsed < earliest[name] {
			t.Fatalf("%q came after %v", name, elapsed)
		}
		order = append(order, name)
	}
	if strings.Join(order, ",") != "now,at,after" {
		t.Fatalf("order %v", order)
	}
}
