// Command topics creates and deletes topics for the demo:
//
//	topics [-brokers B] create NAME PARTITIONS   create a topic (replication 1) and wait until every partition has a leader
//	topics [-brokers B] delete NAME              delete a topic
//
// -brokers defaults to $KAFKA_PEERS.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "topics: %s\n", err)
		os.Exit(1)
	}
}

// run is the command.
func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topics", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", os.Getenv("KAFKA_PEERS"), "Kafka brokers, comma-separated (default $KAFKA_PEERS)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the partitions' leaders")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" {
		return errors.New("-brokers is required (or set KAFKA_PEERS)")
	}
	args = fs.Args()
	switch {
	case len(args) == 3 && args[0] == "create":
		partitions, err := strconv.ParseInt(args[2], 10, 32)
		if err != nil || partitions <= 0 {
			return fmt.Errorf("invalid number of partitions %q", args[2])
		}
		return create(strings.Split(*brokers, ","), args[1], int32(partitions), *timeout, stdout)
	case len(args) == 2 && args[0] == "delete":
		admin, err := sarama.NewClusterAdmin(strings.Split(*brokers, ","), sarama.NewConfig())
		if err != nil {
			return err
		}
		defer admin.Close()
		if err := admin.DeleteTopic(args[1]); err != nil {
			return fmt.Errorf("delete topic %s: %w", args[1], err)
		}
		fmt.Fprintf(stdout, "deleted topic %s\n", args[1])
		return nil
	default:
		return errors.New("usage: topics [-brokers B] create NAME PARTITIONS | delete NAME")
	}
}

// create creates the topic and waits until each of its partitions has a
// leader that accepts writes.
func create(brokers []string, topic string, partitions int32, timeout time.Duration, stdout io.Writer) error {
	client, err := sarama.NewClient(brokers, sarama.NewConfig())
	if err != nil {
		return err
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return err
	}
	defer admin.Close() // closes the client too
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := client.RefreshMetadata(topic)
		var writable []int32
		if err == nil {
			writable, err = client.WritablePartitions(topic)
		}
		if err == nil && len(writable) == int(partitions) {
			fmt.Fprintf(stdout, "created topic %s with %d partitions\n", topic, partitions)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s: %d of %d partitions have a leader after %s (last error: %v)", topic, len(writable), partitions, timeout, err)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}
