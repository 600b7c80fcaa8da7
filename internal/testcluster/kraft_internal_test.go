package testcluster

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestValidMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, kafka, want, err string
	}{
		{"", "3.9.1", ModeZooKeeper, ""},
		{ModeZooKeeper, "2.8.2", ModeZooKeeper, ""},
		{ModeKRaft, "3.9.1", ModeKRaft, ""},
		{ModeKRaft, "4.1.1", ModeKRaft, ""},
		{"", "4.1.1", "", "has no ZooKeeper mode"},
		{ModeKRaft, "3.4.1", "", "needs Kafka 3.9"},
		{"raft", "3.9.1", "", "unknown Mode"},
	} {
		got, err := validMode(tc.mode, tc.kafka)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("validMode(%q, %s) = %q, %v; want an error with %q", tc.mode, tc.kafka, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("validMode(%q, %s) = %q, %v; want %q", tc.mode, tc.kafka, got, err, tc.want)
		}
	}
}

func TestZooKeeperVersionFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ kafka, zk, want string }{
		{"3.9.1", "", ""},
		{"3.9.1", "3.9.4", "3.9.4"},
		{"4.1.1", "", DefaultKRaftZooKeeperVersion},
		{"4.1.1", "3.9.4", "3.9.4"},
	} {
		if got := ZooKeeperVersionFor(tc.kafka, tc.zk); got != tc.want {
			t.Errorf("ZooKeeperVersionFor(%s, %q) = %q, want %q", tc.kafka, tc.zk, got, tc.want)
		}
	}
}

func TestKRaftProps(t *testing.T) {
	t.Parallel()
	c := &Cluster{mode: ModeKRaft}
	for i := 0; i < 3; i++ {
		c.brokers = append(c.brokers, &node{kind: brokerNode, index: i, id: i, port: 9000 + i, controllerPort: 9100 + i})
	}
	props := c.kraftProps(c.brokers[1])
	for k, want := range map[string]string{
		"process.roles":            "broker,controller",
		"node.id":                  "1",
		"controller.quorum.voters": "0@127.0.0.1:9100,1@127.0.0.1:9101,2@127.0.0.1:9102",
		"listeners":                "PLAINTEXT://127.0.0.1:9001,CONTROLLER://127.0.0.1:9101",
		"advertised.listeners":     "PLAINTEXT://127.0.0.1:9001",
	} {
		if props[k] != want {
			t.Errorf("%s = %q, want %q", k, props[k], want)
		}
	}
	id, err := newClusterID()
	if err != nil || len(id) != 22 {
		t.Errorf("newClusterID() = %q, %v; want 22 characters", id, err)
	}
}

// TestNewClusterIDNeverStartsWithDash: kafka-storage reads a cluster ID
// that begins with '-' as an option and refuses to format ("argument
// --cluster-id: expected one argument"), so newClusterID draws again.
func TestNewClusterIDNeverStartsWithDash(t *testing.T) {
	t.Parallel()
	// 0xf8 encodes to '-' as the first base64url character.
	dash := bytes.Repeat([]byte{0xf8}, 16)
	src := io.MultiReader(bytes.NewReader(dash), bytes.NewReader(dash), bytes.NewReader(make([]byte, 16)))
	id, err := newClusterIDFrom(src)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(id, "-") || len(id) != 22 {
		t.Fatalf("newClusterIDFrom = %q; want 22 characters, not starting with '-'", id)
	}
}
