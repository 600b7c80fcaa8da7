package testcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

const pollInterval = 100 * time.Millisecond

// waitUntil polls check until it succeeds. It fails at once when the
// process of one of watched exits, and when ctx ends or c.timeout passes,
// with check's last error and the end of the watched nodes' logs.
func (c *Cluster) waitUntil(ctx context.Context, what string, watched []*node, check func() error) error {
	deadline := time.Now().Add(c.timeout)
	t := time.NewTimer(0)
	defer t.Stop()
	var err error
	for {
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("testcluster: gave up waiting for %s (%w): %v", what, context.Cause(ctx), err)
			}
			return fmt.Errorf("testcluster: gave up waiting for %s: %w", what, context.Cause(ctx))
		case <-t.C:
		}
		for _, n := range watched {
			if n.running() == nil {
				return nodeFailure(n, "exited before serving")
			}
		}
		if err = check(); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("testcluster: %s not ready after %s: %v", what, c.timeout, err)
			for _, n := range watched {
				msg += "\n" + n.logTail()
			}
			return errors.New(msg)
		}
		t.Reset(pollInterval)
	}
}

// nodeFailure describes a node whose JVM exited; a bind failure is marked
// with errPortInUse so that Start retries on other ports.
func nodeFailure(n *node, what string) error {
	tail := n.logTail()
	err := fmt.Errorf("testcluster: %s %s\n%s", n, what, tail)
	if strings.Contains(tail, "Address already in use") {
		return fmt.Errorf("%w (%w)", err, errPortInUse)
	}
	return err
}

// zkMode asks ZooKeeper node n for its status with the srvr four-letter
// word (over TLS in ZooKeeperSecurityTLS: the only port is the secure one)
// and returns its mode (standalone, leader or follower); a server that
// runs but has no quorum answers that it is not serving requests, an error
// wrapping ErrZooKeeperNotServing.
func (c *Cluster) zkMode(n *node) (string, error) {
	addr := n.addr()
	conn, err := c.zkDialer()("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(conn, 64<<10))
	if err != nil && len(b) == 0 {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if mode, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(mode), nil
		}
	}
	if strings.Contains(string(b), "not currently serving requests") {
		return "", fmt.Errorf("%s: %w", addr, ErrZooKeeperNotServing)
	}
	return "", fmt.Errorf("%s answered srvr with %q", addr, firstLine(strings.TrimSpace(string(b))))
}

// waitZooKeepers waits until each of nodes serves.
func (c *Cluster) waitZooKeepers(ctx context.Context, nodes []*node) error {
	what := "ZooKeeper"
	if len(nodes) == 1 {
		what = nodes[0].String()
	}
	return c.waitUntil(ctx, what, nodes, func() error {
		for _, n := range nodes {
			if _, err := c.zkMode(n); err != nil {
				return err
			}
		}
		return nil
	})
}

// saramaConfig is the configuration of the harness's own Kafka requests,
// to the addresses of KafkaPeers.
func (c *Cluster) saramaConfig() (*sarama.Config, error) {
	cfg := sarama.NewConfig()
	cfg.ClientID = "kafkaconsumer-testcluster"
	v, err := sarama.ParseKafkaVersion(c.kafkaVersion)
	if err != nil {
		return nil, fmt.Errorf("testcluster: Kafka version %q: %w", c.kafkaVersion, err)
	}
	cfg.Version = v
	cfg.Net.DialTimeout = 2 * time.Second
	cfg.Net.ReadTimeout = 10 * time.Second
	cfg.Net.WriteTimeout = 10 * time.Second
	cfg.Metadata.Retry.Max = 1
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	cfg.Admin.Timeout = 30 * time.Second
	cfg.Admin.Retry.Max = 10
	cfg.Admin.Retry.Backoff = 200 * time.Millisecond
	if err := c.clientConfig(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// metadata asks the broker at addr for the metadata of topics (nil: all).
func (c *Cluster) metadata(addr string, topics []string) (*sarama.MetadataResponse, error) {
	cfg, err := c.saramaConfig()
	if err != nil {
		return nil, err
	}
	b := sarama.NewBroker(addr)
	if err := b.Open(cfg); err != nil {
		return nil, err
	}
	defer b.Close()
	return b.GetMetadata(sarama.NewMetadataRequest(cfg.Version, topics))
}

// runningBrokers returns the brokers whose JVM runs.
func (c *Cluster) runningBrokers() []*node {
	var out []*node
	for _, n := range c.brokers {
		if n.running() != nil {
			out = append(out, n)
		}
	}
	return out
}

// waitBrokers waits until each running broker answers metadata requests
// with a controller and a broker list holding every running broker: then
// each is registered in ZooKeeper and known to the controller. started are
// the brokers just started, whose exit fails the wait at once.
func (c *Cluster) waitBrokers(ctx context.Context, started []*node) error {
	what := "the Kafka brokers"
	if len(started) == 1 {
		what = started[0].String()
	}
	return c.waitUntil(ctx, what, started, func() error {
		running := c.runningBrokers()
		for _, n := range running {
			md, err := c.metadata(n.addr(), []string{})
			if err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			if md.ControllerID < 0 {
				return fmt.Errorf("%s knows no controller yet", n)
			}
			var ids []int32
			for _, b := range md.Brokers {
				ids = append(ids, b.ID())
			}
			for _, m := range running {
				if !slices.Contains(ids, int32(m.id)) {
					return fmt.Errorf("%s does not list broker %d yet (lists %v)", n, m.id, ids)
				}
			}
		}
		return nil
	})
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// waitZNodesGone waits until none of paths exists in ZooKeeper.
func (c *Cluster) waitZNodesGone(ctx context.Context, paths []string, timeout time.Duration) error {
	conn, err := c.connectZooKeeper()
	if err != nil {
		return err
	}
	// It polls rather than watches: go-zookeeper re-sets its watches when
	// it reconnects (as when a ZooKeeper node restarts) while its receive
	// loop may already write the zxid that the re-setting reads, a data
	// race that -race reports in the caller's test (go-zookeeper/zk
	// PR #35). A connection without watches never re-sets any.
	done, quit := make(chan error, 1), make(chan struct{})
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for _, path := range paths {
			for {
				ok, _, err := conn.Exists(path)
				if err != nil {
					done <- err
					return
				}
				if !ok {
					break
				}
				select {
				case <-tick.C:
				case <-quit:
					done <- errors.New("stopped")
					return
				}
			}
		}
		done <- nil
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err = <-done:
	case <-t.C:
		err = fmt.Errorf("still there after %s", timeout)
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	close(quit)
	conn.Close() // ends the goroutine's request
	return err
}
