package compat

import (
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

type user struct {
	Name string `json:"name" avro:"name"`
	Age  int    `json:"age" avro:"age"`
}

const userSchema = `{"type":"record","name":"User","namespace":"compat","fields":[` +
	`{"name":"name","type":"string"},{"name":"age","type":"int"}]}`

const otherSchema = `{"type":"record","name":"User","namespace":"compat","fields":[` +
	`{"name":"email","type":"string"}]}`

func TestSchemas(t *testing.T) {
	cases := map[string]func(def string) pulsar.Schema{
		"avro": func(def string) pulsar.Schema { return pulsar.NewAvroSchema(def, nil) },
		"json": func(def string) pulsar.Schema { return pulsar.NewJSONSchema(def, nil) },
	}
	client := newClient(t)
	for name, schema := range cases {
		t.Run(name, func(t *testing.T) {
			topic := newTopic("schema-" + name)
			consumer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
				Schema: schema(userSchema)})
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			defer consumer.Close()
			producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: schema(userSchema)})
			if err != nil {
				t.Fatalf("producer: %v", err)
			}
			defer producer.Close()
			if _, err := producer.Send(ctxTimeout(t, 10*time.Second), &pulsar.ProducerMessage{
				Value: &user{Name: "ada", Age: 36}}); err != nil {
				t.Fatalf("send: %v", err)
			}
			msg := receiveN(t, consumer, 1, 10*time.Second)[0]
			var got user
			if err := msg.GetSchemaValue(&got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got != (user{Name: "ada", Age: 36}) {
				t.Fatalf("got %+v", got)
			}
			if len(msg.SchemaVersion()) == 0 {
				t.Fatal("the message carries no schema version")
			}
			_, err = client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: schema(otherSchema)})
			if err == nil {
				t.Fatal("a producer with an incompatible schema was accepted")
			}
		})
	}
}
