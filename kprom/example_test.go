package kprom_test

import (
	"context"
	"log"
	"net/http"

	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/kprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// A consumer whose metrics are served on :9100/metrics.
func Example() {
	metrics := kprom.New()
	prometheus.MustRegister(metrics)
	http.Handle("/metrics", promhttp.Handler())
	go func() { log.Println(http.ListenAndServe(":9100", nil)) }()

	config := kafkaconsumer.NewConfig()
	config.Metrics = metrics
	consumer, err := kafkaconsumer.Join("my-group", kafkaconsumer.TopicSubscription("my-topic"), "localhost:2181", config)
	if err != nil {
		log.Fatalln(err)
	}
	metrics.Observe("my-group", consumer)
	defer consumer.Shutdown(context.Background())

	for msg := range consumer.Messages() {
		// process msg
		consumer.Ack(msg)
	}
}
