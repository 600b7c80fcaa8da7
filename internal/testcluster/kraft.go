package testcluster

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
)

// The cluster modes (Options.Mode).
const (
	// ModeZooKeeper runs ZooKeeper-mode brokers, registered in the
	// cluster's ZooKeeper (Kafka before 4.0).
	ModeZooKeeper = "zookeeper"
	// ModeKRaft runs KRaft brokers: each broker is also a controller
	// (process.roles=broker,controller), all of them the controller
	// quorum, with storage formatted by kafka.tools.StorageTool before the
	// first start. The ZooKeeper nodes still run, stand-alone: the brokers
	// do not use them; they are there for the consumer groups.
	ModeKRaft = "kraft"
)

// DefaultKRaftZooKeeperVersion is the ZooKeeper release the stand-alone
// ZooKeeper runs from when Kafka 4 or later (whose jars bring no ZooKeeper)
// runs in ModeKRaft and Options.ZooKeeperVersion is empty: the server
// Kafka 3.9 brings.
const DefaultKRaftZooKeeperVersion = "3.8.4"

// validMode returns the mode Options.Mode names ("" is ModeZooKeeper),
// or an error for one that this package does not run with the version.
func validMode(mode, kafkaVersion string) (string, error) {
	switch mode {
	case "", ModeZooKeeper:
		if majorMinor(kafkaVersion) >= 400 {
			return "", fmt.Errorf("testcluster: Kafka %s has no ZooKeeper mode; use Mode %q", kafkaVersion, ModeKRaft)
		}
		return ModeZooKeeper, nil
	case ModeKRaft:
		if majorMinor(kafkaVersion) < 309 {
			return "", fmt.Errorf("testcluster: Mode %q needs Kafka 3.9 or later (its StorageTool and KRaft settings), not %s", ModeKRaft, kafkaVersion)
		}
		return ModeKRaft, nil
	}
	return "", fmt.Errorf("testcluster: unknown Mode %q (want %q or %q)", mode, ModeZooKeeper, ModeKRaft)
}

// newClusterID returns a KRaft cluster ID: 16 random bytes, URL-safe
// base64 without padding, as kafka-storage random-uuid prints, never
// starting with '-' (kafka-storage would read it as an option).
func newClusterID() (string, error) {
	return newClusterIDFrom(rand.Reader)
}

// newClusterIDFrom is newClusterID drawing its bytes from src.
func newClusterIDFrom(src io.Reader) (string, error) {
	var b [16]byte
	for {
		if _, err := io.ReadFull(src, b[:]); err != nil {
			return "", fmt.Errorf("testcluster: %w", err)
		}
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id, nil
		}
	}
}

// kraftProps returns the settings of broker n in ModeKRaft that replace
// the ZooKeeper ones: its role, node id, listeners (PLAINTEXT on its port,
// CONTROLLER on its controller port, and with SecurityMixed EXTERNAL on
// its secure port) and the static controller quorum of every broker.
func (c *Cluster) kraftProps(n *node) map[string]string {
	voters := make([]string, len(c.brokers))
	for i, b := range c.brokers {
		voters[i] = fmt.Sprintf("%d@127.0.0.1:%d", b.id, b.controllerPort)
	}
	listeners, protocols := "PLAINTEXT://"+n.addr(), "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
	internalRF := strconv.Itoa(min(3, len(c.brokers)))
	if c.security == SecurityMixed {
		listeners += "," + externalListener + "://" + n.secureAddr()
		protocols += "," + externalListener + ":SASL_SSL"
	}
	return map[string]string{
		"process.roles":                  "broker,controller",
		"node.id":                        strconv.Itoa(n.id),
		"controller.quorum.voters":       strings.Join(voters, ","),
		"controller.listener.names":      "CONTROLLER",
		"listeners":                      listeners + ",CONTROLLER://127.0.0.1:" + strconv.Itoa(n.controllerPort),
		"advertised.listeners":           listeners,
		"listener.security.protocol.map": protocols,
		"inter.broker.listener.name":     "PLAINTEXT",
		// The consumer group protocol's (KIP-848) session timeout, 45 s
		// by default and at least that, down to 10 s (at least 6 s), so
		// that its tests see a killed member replaced in seconds; its
		// heartbeat interval down to 1 s (at least 500 ms).
		"group.consumer.session.timeout.ms":        "10000",
		"group.consumer.min.session.timeout.ms":    "6000",
		"group.consumer.heartbeat.interval.ms":     "1000",
		"group.consumer.min.heartbeat.interval.ms": "500",
		// Share groups (KIP-932): Kafka 4.2 and later format the storage
		// with share.version 1 (generally available). Their share
		// coordinator keeps the partitions' state in __share_group_state,
		// replicated 3 times by default: with fewer brokers its creation
		// fails and no member is ever assigned a partition, so it is
		// replicated as __consumer_offsets is. Their session timeout and heartbeat
		// interval are shortened as the consumer protocol's, so that an
		// assignment reaches a joining member within a second. The
		// record lock (group.share.record.lock.duration.ms, 30 s, at
		// least 15 s) and the delivery count limit
		// (group.share.delivery.count.limit, 5) keep their defaults: a
		// test sets its group's share.record.lock.duration.ms or
		// share.delivery.count.limit with IncrementalAlterConfigs.
		"share.coordinator.state.topic.replication.factor": internalRF,
		"share.coordinator.state.topic.min.isr":            "1",
		"share.coordinator.state.topic.num.partitions":     "10",
		"group.share.session.timeout.ms":                   "10000",
		"group.share.min.session.timeout.ms":               "6000",
		"group.share.heartbeat.interval.ms":                "1000",
		"group.share.min.heartbeat.interval.ms":            "500",
	}
}

// zookeeperOnlyProps are the broker settings that KRaft brokers do not
// take (Kafka 4 logs them as unknown, 3.9 refuses zookeeper.connect with
// process.roles).
var zookeeperOnlyProps = []string{
	"broker.id", "zookeeper.connect", "zookeeper.session.timeout.ms", "zookeeper.connection.timeout.ms",
	"controlled.shutdown.max.retries", "controlled.shutdown.retry.backoff.ms",
}

// formatStorage formats broker n's log directory for the cluster ID
// (kafka-storage format), which a KRaft broker needs before its first
// start; in a secured mode, with the SCRAM-SHA-512 and SCRAM-SHA-256
// credentials of SASLUser.
func (c *Cluster) formatStorage(n *node) error {
	cmd := exec.CommandContext(c.ctx, c.java, "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dlog4j.configuration=file:"+filepath.Join(n.dir, "log4j.properties"),
		"-cp", filepath.Join(c.jars, "*"),
		"kafka.tools.StorageTool", "format", "--cluster-id", c.clusterID, "--config", n.configFile(), "--ignore-formatted")
	for _, name := range slices.Sorted(maps.Keys(c.features)) {
		cmd.Args = append(cmd.Args, "--feature", fmt.Sprintf("%s=%d", name, c.features[name]))
	}
	if c.security != SecurityPlaintext {
		// The SCRAM credentials go into the metadata log (KIP-900):
		// there is no ZooKeeper for them.
		for _, m := range []string{sarama.SASLTypeSCRAMSHA512, sarama.SASLTypeSCRAMSHA256} {
			cmd.Args = append(cmd.Args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", m, SASLUser, c.saslPassword))
		}
	}
	cmd.Dir = n.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testcluster: formatting the storage of %s: %v\n%s", n, err, tailString(string(out), 20))
	}
	return nil
}

// ZooKeeperVersionFor returns the ZooKeeper release whose own jars a
// cluster of Kafka kafka runs its ZooKeeper from, given $ZOOKEEPER_VERSION
// (zookeeper): zookeeper when set; else, for Kafka 4 or later (which
// brings none), DefaultKRaftZooKeeperVersion; else "" (the one Kafka
// brings).
func ZooKeeperVersionFor(kafka, zookeeper string) string {
	if zookeeper == "" && majorMinor(kafka) >= 400 {
		return DefaultKRaftZooKeeperVersion
	}
	return zookeeper
}
