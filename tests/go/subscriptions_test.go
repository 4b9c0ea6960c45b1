package compat

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

func TestEachSubscriptionType(t *testing.T) {
	types := map[string]pulsar.SubscriptionType{
		"exclusive": pulsar.Exclusive, "shared": pulsar.Shared,
		"failover": pulsar.Failover, "key-shared": pulsar.KeyShared,
	}
	client := newClient(t)
	for name, subType := range types {
		t.Run(name, func(t *testing.T) {
			topic := newTopic(name)
			consumer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: subType})
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			defer consumer.Close()
			producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
			if err != nil {
				t.Fatalf("producer: %v", err)
			}
			defer producer.Close()
			for i := 0; i < 20; i++ {
				if _, err := producer.Send(ctxTimeout(t, 10*time.Second), &pulsar.ProducerMessage{
					Payload: []byte(fmt.Sprintf("m-%d", i)), Key: fmt.Sprintf("k-%d", i%4)}); err != nil {
					t.Fatalf("send: %v", err)
				}
			}
			for i, msg := range receiveN(t, consumer, 20, 10*time.Second) {
				if got := string(msg.Payload()); got != fmt.Sprintf("m-%d", i) {
					t.Fatalf("message %d is %q", i, got)
				}
			}
			if name == "exclusive" {
				_, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: subType})
				if err == nil {
					t.Fatal("a second exclusive consumer was accepted")
				}
			}
		})
	}
}

func TestKeySharedKeepsOrderPerKeyAsConsumersJoinAndLeave(t *testing.T) {
	client := newClient(t)
	topic := newTopic("key-shared-order")
	subscribe := func() pulsar.Consumer {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ks", Type: pulsar.KeyShared,
			ReceiverQueueSize: 10})
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		return c
	}
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer producer.Close()

	const perKey = 60
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var mu sync.Mutex
	highest := map[string]int{}
	seen := map[string]bool{}
	done := make(chan struct{})
	// A message not seen before must come after every message of its key seen so far;
	// a redelivered one (its consumer left before acknowledging it) may repeat.
	consume := func(c pulsar.Consumer, stop <-chan struct{}, wg *sync.WaitGroup) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case msg, ok := <-c.Chan():
				if !ok {
					return
				}
				var n int
				fmt.Sscanf(string(msg.Payload()), "%d", &n)
				id := fmt.Sprintf("%s/%d", msg.Key(), n)
				mu.Lock()
				if !seen[id] {
					if prev, found := highest[msg.Key()]; found && n <= prev {
						t.Errorf("key %s: %d after %d", msg.Key(), n, prev)
					}
					seen[id] = true
					highest[msg.Key()] = n
					if len(seen) == perKey*len(keys) {
						close(done)
					}
				}
				mu.Unlock()
				_ = c.Ack(msg)
			}
		}
	}
	first := subscribe()
	defer first.Close()
	var firstWg, secondWg sync.WaitGroup
	firstWg.Add(1)
	go consume(first, nil, &firstWg)
	send := func(from, to int) {
		for n := from; n < to; n++ {
			for _, k := range keys {
				producer.SendAsync(ctxTimeout(t, 10*time.Second), &pulsar.ProducerMessage{
					Key: k, Payload: []byte(fmt.Sprintf("%d", n))}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						t.Errorf("send: %v", err)
					}
				})
			}
		}
		if err := producer.Flush(); err != nil {
			t.Fatalf("flush: %v", err)
		}
	}
	send(0, 20)
	second := subscribe()
	stopSecond := make(chan struct{})
	secondWg.Add(1)
	go consume(second, stopSecond, &secondWg)
	send(20, 40)
	close(stopSecond)
	secondWg.Wait()
	second.Close() // leaves with messages it had not acknowledged: they go to the first, in order
	send(40, perKey)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("received %d of %d", len(seen), perKey*len(keys))
	}
}
