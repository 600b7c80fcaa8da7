package testcluster

import (
	"strings"
	"testing"
)

// TestOldKafkaReleases: the Scala build and ZooKeeper jars the test
// cluster runs old Kafka releases with, and the secured modes refused
// before Kafka 2.7.
func TestOldKafkaReleases(t *testing.T) {
	for _, c := range []struct{ kafka, scala, zookeeper string }{
		{"1.1.1", "2.12", ""},
		{"2.0.1", "2.12", "3.5.9"},
		{"2.2.2", "2.12", "3.5.9"},
		{"2.3.1", "2.12", "3.5.9"},
		{"2.4.1", "2.13", ""},
		{"3.9.1", "2.13", ""},
	} {
		if got := kafkaScala(c.kafka); got != c.scala {
			t.Errorf("kafkaScala(%s) = %s; want %s", c.kafka, got, c.scala)
		}
		if got := zookeeperClientFor(c.kafka); got != c.zookeeper {
			t.Errorf("zookeeperClientFor(%s) = %q; want %q", c.kafka, got, c.zookeeper)
		}
	}
	if o := zookeeperOverride("3.5.9"); !strings.Contains(o, "<artifactId>zookeeper-jute</artifactId>") || !strings.Contains(o, "<artifactId>slf4j-log4j12</artifactId>") {
		t.Errorf("zookeeperOverride: %s", o)
	}
	_, err := Start(Options{KafkaVersion: "2.6.3", Security: SecuritySASLSSL})
	if err == nil || !strings.Contains(err.Error(), "needs Kafka 2.7") {
		t.Errorf("Start of a secured Kafka 2.6.3 = %v; want an error saying it needs Kafka 2.7", err)
	}
}
