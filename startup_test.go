package kafkaconsumer

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// Kafka's API keys that TestStartupRequests counts.
const (
	apiFetch       = 1
	apiListOffsets = 2
	apiMetadata    = 3
	apiOffsetFetch = 9
	apiFindCoord   = 10
)

// requestCounter is a proxy dialer (sarama's Net.Proxy.Dialer) whose
// connections count the Kafka requests written through them, by API key:
// each request is a 4-byte size, then its 2-byte API key.
type requestCounter struct {
	mu     sync.Mutex
	counts map[int16]int
}

func (rc *requestCounter) Dial(network, addr string) (net.Conn, error) {
	return rc.DialContext(context.Background(), network, addr)
}

func (rc *requestCounter) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, rc: rc}, nil
}

// count returns how many requests of key were written.
func (rc *requestCounter) count(key int16) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.counts[key]
}

func (rc *requestCounter) String() string {
	return fmt.Sprintf("Metadata %d, FindCoordinator %d, OffsetFetch %d, ListOffsets %d, Fetch %d",
		rc.count(apiMetadata), rc.count(apiFindCoord), rc.count(apiOffsetFetch), rc.count(apiListOffsets), rc.count(apiFetch))
}

// countingConn parses the request frames its writes carry.
type countingConn struct {
	net.Conn
	rc      *requestCounter
	pending []byte // the start of a frame header not complete yet
	skip    int    // bytes of the current frame's body still to pass
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.parse(b)
	return c.Conn.Write(b)
}

func (c *countingConn) parse(b []byte) {
	for len(b) > 0 {
		if c.skip > 0 {
			n := min(c.skip, len(b))
			c.skip -= n
			b = b[n:]
			continue
		}
		need := 6 - len(c.pending)
		n := min(need, len(b))
		c.pending = append(c.pending, b[:n]...)
		b = b[n:]
		if len(c.pending) < 6 {
			return
		}
		size := int(binary.BigEndian.Uint32(c.pending[:4]))
		key := int16(binary.BigEndian.Uint16(c.pending[4:6]))
		c.rc.mu.Lock()
		c.rc.counts[key]++
		c.rc.mu.Unlock()
		c.pending = c.pending[:0]
		c.skip = size - 2
	}
}

// TestStartupRequests: an instance starts its partitions with requests per
// broker, not per partition: one OffsetFetch for all the committed
// offsets, no ListOffsets when every partition has a commit, and, in a
// new group, ListOffsets batched per broker. sarama's ConsumePartition
// sent two ListOffsets for every partition (the oldest and the newest
// offset) before its first fetch: 128 for 64 partitions.
func TestStartupRequests(t *testing.T) {
	parallelClusterTest(t)
	const partitions = 64
	client := newTestClient(t)
	topic := newTopic(t, partitions)
	produce(t, client, topic, "startup", 2*partitions)

	for _, committed := range []bool{true, false} {
		group := uniqueName("startup")
		if committed {
			commitOffsets(t, client, group, topic, newestOffsets(t, client, topic))
		}
		rc := &requestCounter{counts: make(map[int16]int)}
		config := testConfig()
		config.Offsets.Initial = sarama.OffsetOldest
		config.Net.Proxy.Enable = true
		config.Net.Proxy.Dialer = rc
		c := joinWithCleanup(t, group, TopicSubscription(topic), config)
		waitFor(t, 30*time.Second, "every partition fetched", func() bool {
			stats := c.Stats()
			for _, s := range stats {
				if s.HighWaterMark < 0 {
					return false
				}
			}
			return len(stats) == partitions
		})
		t.Logf("committed %v, %d partitions on one broker: %s", committed, partitions, rc)
		if n := rc.count(apiOffsetFetch); n != 1 {
			t.Errorf("committed %v: %d OffsetFetch requests, want 1 for every partition", committed, n)
		}
		// One broker: a ListOffsets per client that asks (the batched
		// Offsets.Initial of a new group), none with every offset
		// committed.
		want := 0
		if !committed {
			want = 1
		}
		if n := rc.count(apiListOffsets); n > want {
			t.Errorf("committed %v: %d ListOffsets requests, want at most %d", committed, n, want)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	}
}
