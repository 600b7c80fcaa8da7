package kafkaconsumer

import (
	"errors"
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

// TestCommitFailedNamesConsumerProtocolErrors: a commit refused with an
// error code of the consumer group protocol, which sarama does not name,
// reaches Errors() with the code's name and Kafka's message, and still
// matches the code with errors.Is.
func TestCommitFailedNamesConsumerProtocolErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code sarama.KError
		name string
	}{
		{errFencedMemberEpoch, "FENCED_MEMBER_EPOCH"},
		{errUnreleasedInstanceID, "UNRELEASED_INSTANCE_ID"},
		{errUnsupportedAssignor, "UNSUPPORTED_ASSIGNOR"},
		{errStaleMemberEpoch, "STALE_MEMBER_EPOCH"},
		{sarama.ErrUnknownMemberId, "member is not known"}, // sarama's own: unchanged
	} {
		config := NewConfig()
		config.Consumer.Return.Errors = true
		cm := &consumerManager{config: config, errors: make(chan error, 1)}
		cm.commitFailed(TopicPartition{Topic: "t", Partition: 0}, tc.code)
		err := <-cm.errors
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.name)) || strings.Contains(err.Error(), "how did this happen") {
			t.Errorf("code %d reported as %q, want it named %s", int16(tc.code), err, tc.name)
		}
		if !errors.Is(err, tc.code) {
			t.Errorf("code %d reported as %q, which errors.Is does not match to the code", int16(tc.code), err)
		}
	}
}
