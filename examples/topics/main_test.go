package main

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"
)

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-brokers", "b:9092"},
		{"-brokers", "b:9092", "create", "t"},
		{"-brokers", "b:9092", "create", "t", "zero"},
		{"-brokers", "b:9092", "create", "t", "0"},
		{"-brokers", "b:9092", "remove", "t"},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(args, &stdout, &stderr); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestCreateDeleteIntegration creates and deletes a topic on the cluster of
// KAFKA_PEERS (skipped without it or under -short).
func TestCreateDeleteIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a cluster; skipped under -short")
	}
	kafka := os.Getenv("KAFKA_PEERS")
	if kafka == "" {
		t.Skip("needs a cluster: set KAFKA_PEERS")
	}
	topic := fmt.Sprintf("topics-test.%d.%06d", time.Now().UnixNano()%1e9, rand.Intn(1e6))
	var stdout, stderr bytes.Buffer
	if err := run([]string{"-brokers", kafka, "create", topic, "3"}, &stdout, &stderr); err != nil {
		t.Fatalf("create: %s", err)
	}
	if err := run([]string{"-brokers", kafka, "create", topic, "3"}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second create: got %v, want an error saying it exists", err)
	}
	if err := run([]string{"-brokers", kafka, "delete", topic}, &stdout, &stderr); err != nil {
		t.Fatalf("delete: %s", err)
	}
	want := fmt.Sprintf("created topic %s with 3 partitions\ndeleted topic %s\n", topic, topic)
	if stdout.String() != want {
		t.Errorf("output %q, want %q", stdout.String(), want)
	}
}
