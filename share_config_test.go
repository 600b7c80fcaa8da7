package kafkaconsumer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// shareConfig is a valid configuration of a share group, without a
// cluster.
func shareConfig() *Config {
	c := NewConfig()
	c.Coordinator = CoordinatorKafka
	c.GroupProtocol = GroupProtocolShare
	c.Brokers = []string{"kafka1:9092"}
	c.Version = sarama.V4_0_0_0
	return c
}

// TestShareConfigValidate: Validate accepts a share group with
// CoordinatorKafka, and refuses, naming the setting, what a share group
// has no use for.
func TestShareConfigValidate(t *testing.T) {
	t.Parallel()
	if err := shareConfig().Validate(); err != nil {
		t.Fatalf("Validate() of a share group = %s", err)
	}
	batches := shareConfig()
	batches.BatchSize, batches.BatchLinger = 10, time.Second
	if err := batches.Validate(); err != nil {
		t.Errorf("Validate() of a share group with BatchSize and BatchLinger = %s, want nil", err)
	}
	if got := GroupProtocolShare.String(); got != "GroupProtocolShare" {
		t.Errorf("GroupProtocolShare.String() = %q", got)
	}
	cases := []struct {
		name   string
		change func(*Config)
		want   string // in the error message
	}{
		{"CoordinatorZooKeeper", func(c *Config) { c.Coordinator = CoordinatorZooKeeper; c.Brokers = nil }, "set Coordinator to CoordinatorKafka"},
		{"InstanceID", func(c *Config) { c.InstanceID = "a" }, "InstanceID"},
		{"DurableAcks", func(c *Config) { c.DurableAcks = true }, "DurableAcks"},
		{"GroupRemoteAssignor", func(c *Config) { c.GroupRemoteAssignor = "uniform" }, "GroupRemoteAssignor"},
		{"CommitLastProcessed", func(c *Config) { c.CommitLastProcessed = true }, "CommitLastProcessed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := shareConfig()
			tc.change(c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "GroupProtocolShare") {
				t.Fatalf("Validate() = %q, want it to name %s and GroupProtocolShare", err, tc.want)
			}
		})
	}
}

// TestShareAutoOffsetReset: Offsets.Initial maps to the group's
// share.auto.offset.reset.
func TestShareAutoOffsetReset(t *testing.T) {
	t.Parallel()
	for initial, want := range map[int64]string{sarama.OffsetOldest: "earliest", sarama.OffsetNewest: "latest"} {
		if got := shareAutoOffsetReset(initial); got != want {
			t.Errorf("shareAutoOffsetReset(%d) = %q, want %q", initial, got, want)
		}
	}
}
