package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestMigrateUsageErrors: the migrate verb's bad combinations of flags
// are usage errors (exit status 2) that say what is wrong, with nothing
// on stdout.
func TestMigrateUsageErrors(t *testing.T) {
	t.Setenv("ZOOKEEPER_PEERS", "") // the default of --zookeeper
	t.Setenv("KAFKA_SASL_PASSWORD", "")
	zk := []string{"migrate", "--zookeeper", "zk:2181", "--group", "g"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no zookeeper", []string{"migrate", "--group", "g", "--to", "kafka"}, "--zookeeper is required"},
		{"bootstrap alone without --protocol", []string{"migrate", "--bootstrap-server", "k:9092", "--group", "g", "--to", "kafka"}, "with --protocol, --bootstrap-server alone will do"},
		{"no --to", zk, `--to must be kafka or zookeeper, got ""`},
		{"unknown protocol", append(zk, "--to", "kafka", "--protocol", "kip848"), `--protocol must be consumer or classic, got "kip848"`},
		{"protocol in capitals", append(zk, "--to", "kafka", "--protocol", "CONSUMER"), `--protocol must be consumer or classic, got "CONSUMER"`},
		{"protocol back to zookeeper", append(zk, "--to", "zookeeper", "--protocol", "classic"), "--protocol goes with --to kafka only"},
		{"json without protocol", append(zk, "--to", "kafka", "--json"), "--json goes with --protocol only"},
		{"negative wait", append(zk, "--to", "kafka", "--protocol", "consumer", "--wait", "-1s"), "--wait must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != exitUsage {
				t.Errorf("exit status %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr.String())
			}
			if stdout.Len() > 0 {
				t.Errorf("unexpected output: %s", stdout.String())
			}
		})
	}
}

// TestProtocolStatusJudge: a group is done when Kafka's group is Stable
// with at least MinMembers members, every one of the target protocol.
func TestProtocolStatusJudge(t *testing.T) {
	t.Parallel()
	members := func(protocols ...string) []ProtocolMember {
		var ms []ProtocolMember
		for _, p := range protocols {
			ms = append(ms, ProtocolMember{MemberProtocol: p})
		}
		return ms
	}
	for _, tc := range []struct {
		name    string
		target  string
		state   string
		members []ProtocolMember
		min     int
		done    bool
	}{
		{"all consumer, stable", GroupProtocolConsumer, "Stable", members("consumer", "consumer"), 2, true},
		{"one classic left", GroupProtocolConsumer, "Stable", members("classic", "consumer"), 2, false},
		{"reconciling", GroupProtocolConsumer, "Reconciling", members("consumer", "consumer"), 2, false},
		{"one restarting", GroupProtocolConsumer, "Stable", members("consumer"), 2, false},
		{"more than at the start", GroupProtocolConsumer, "Stable", members("consumer", "consumer", "consumer"), 2, true},
		{"untyped members", GroupProtocolConsumer, "Stable", members("unknown"), 1, false},
		{"empty", GroupProtocolClassic, "Empty", nil, 1, false},
		{"all classic", GroupProtocolClassic, "Stable", members("classic", "classic"), 2, true},
		{"a consumer left", GroupProtocolClassic, "Stable", members("classic", "consumer"), 1, false},
		{"classic, rebalancing", GroupProtocolClassic, "PreparingRebalance", members("classic"), 1, false},
	} {
		st := &ProtocolStatus{TargetProtocol: tc.target, KafkaState: tc.state, Members: tc.members, MinMembers: tc.min}
		for _, m := range tc.members {
			switch m.MemberProtocol {
			case GroupProtocolClassic:
				st.ClassicMembers++
			case GroupProtocolConsumer:
				st.ConsumerMembers++
			}
		}
		if st.judge(); st.Done != tc.done {
			t.Errorf("%s: done %t, want %t (missing: %s)", tc.name, st.Done, tc.done, st.missing())
		}
	}
}
