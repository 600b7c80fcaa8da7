package testcluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// admin returns a cluster admin connected to the running brokers.
func (c *Cluster) admin() (sarama.ClusterAdmin, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	var addrs []string
	for _, n := range c.runningBrokers() {
		addrs = append(addrs, n.addr())
	}
	if len(addrs) == 0 {
		return nil, errors.New("testcluster: no broker is running")
	}
	cfg, err := c.adminConfig()
	if err != nil {
		return nil, err
	}
	return sarama.NewClusterAdmin(addrs, cfg)
}

// adminConfig is the configuration of the harness's admin requests: a
// CreateTopics or DeleteTopics asks the controller to answer within
// Admin.Timeout, so the connection waits longer than that for the answer.
func (c *Cluster) adminConfig() (*sarama.Config, error) {
	cfg, err := c.saramaConfig()
	if err != nil {
		return nil, err
	}
	cfg.Net.ReadTimeout = cfg.Admin.Timeout + 10*time.Second
	return cfg, nil
}

// CreateTopic creates a topic and waits until every running broker's
// metadata shows a leader for each of its partitions. A topic that exists
// already is an error matching sarama.ErrTopicAlreadyExists (errors.Is).
func (c *Cluster) CreateTopic(name string, partitions int32, replication int16) error {
	admin, err := c.admin()
	if err != nil {
		return err
	}
	defer admin.Close()
	detail := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: replication}
	if err := admin.CreateTopic(name, detail, false); err != nil {
		return fmt.Errorf("testcluster: creating topic %q: %w", name, err)
	}
	what := fmt.Sprintf("topic %q (%d partitions) to have leaders", name, partitions)
	return c.waitUntil(c.ctx, what, nil, func() error {
		for _, n := range c.runningBrokers() {
			md, err := c.metadata(n.addr(), []string{name})
			if err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			if len(md.Topics) != 1 || !errors.Is(md.Topics[0].Err, sarama.ErrNoError) {
				return fmt.Errorf("%s does not know the topic yet", n)
			}
			t := md.Topics[0]
			if len(t.Partitions) != int(partitions) {
				return fmt.Errorf("%s knows %d of %d partitions", n, len(t.Partitions), partitions)
			}
			for _, p := range t.Partitions {
				if p.Leader < 0 {
					return fmt.Errorf("%s: partition %d has no leader yet", n, p.ID)
				}
			}
		}
		return nil
	})
}

// DeleteTopic deletes a topic and waits until the deletion is complete
// (the controller has removed it from ZooKeeper, so that a topic of the
// same name can be created again) and no running broker lists it.
func (c *Cluster) DeleteTopic(name string) error {
	admin, err := c.admin()
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := admin.DeleteTopic(name); err != nil {
		return fmt.Errorf("testcluster: deleting topic %q: %w", name, err)
	}
	paths := []string{"/admin/delete_topics/" + name, "/brokers/topics/" + name}
	if err := c.waitZNodesGone(c.ctx, paths, c.timeout); err != nil {
		return fmt.Errorf("testcluster: deleting topic %q: %w", name, err)
	}
	return c.waitUntil(c.ctx, fmt.Sprintf("topic %q to disappear", name), nil, func() error {
		for _, n := range c.runningBrokers() {
			md, err := c.metadata(n.addr(), []string{name})
			if err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			if len(md.Topics) == 1 && errors.Is(md.Topics[0].Err, sarama.ErrNoError) {
				return fmt.Errorf("%s still lists it", n)
			}
		}
		return nil
	})
}
