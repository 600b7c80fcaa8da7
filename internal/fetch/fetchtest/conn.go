package fetchtest

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Conn is a connection to a broker that sends kmsg requests one at a time
// and returns their responses' bodies undecoded. Not safe for concurrent
// use.
type Conn struct {
	conn net.Conn
	f    *kmsg.RequestFormatter
	corr int32
}

// Dial connects to the broker at addr.
func Dial(addr string) (*Conn, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return &Conn{conn: conn, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("fetchtest"))}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.conn.Close() }

// Send sends req and returns the body of its response (after the
// response header), waiting up to 30 seconds.
func (c *Conn) Send(req kmsg.Request) ([]byte, error) {
	c.corr++
	if err := c.conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := c.conn.Write(c.f.AppendRequest(nil, req, c.corr)); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(c.conn, size[:]); err != nil {
		return nil, err
	}
	resp := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.conn, resp); err != nil {
		return nil, err
	}
	if len(resp) < 4 || int32(binary.BigEndian.Uint32(resp)) != c.corr {
		return nil, fmt.Errorf("fetchtest: response to request %d is not its answer", c.corr)
	}
	resp = resp[4:]
	// Flexible responses have tagged fields in their header, but for
	// ApiVersions (whose header a client must read before it knows).
	if req.IsFlexible() && req.Key() != 18 {
		return SkipHeaderTags(resp)
	}
	return resp, nil
}

// SkipHeaderTags returns b, a flexible response's header after its
// correlation ID, from its body on: past the header's tagged fields.
func SkipHeaderTags(b []byte) ([]byte, error) {
	tags, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, fmt.Errorf("fetchtest: response header cut short")
	}
	b = b[n:]
	for range tags {
		_, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("fetchtest: response header cut short")
		}
		l, m := binary.Uvarint(b[n:])
		if m <= 0 || uint64(len(b)-n-m) < l {
			return nil, fmt.Errorf("fetchtest: response header cut short")
		}
		b = b[n+m+int(l):]
	}
	return b, nil
}

// Versions returns the lowest and highest versions of the request of
// apiKey (Fetch: 1, Produce: 0) that the broker takes.
func (c *Conn) Versions(apiKey int16) (lowest, highest int16, err error) {
	req := kmsg.NewPtrApiVersionsRequest()
	body, err := c.Send(req)
	if err != nil {
		return 0, 0, err
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = req.Version
	if err := resp.ReadFrom(body); err != nil {
		return 0, 0, err
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == apiKey {
			return k.MinVersion, k.MaxVersion, nil
		}
	}
	return 0, 0, fmt.Errorf("fetchtest: the broker takes no request of key %d", apiKey)
}

// FetchRequest returns a Fetch request of version for one partition from
// offset, up to maxBytes of it, waiting up to half a second for a byte.
func FetchRequest(version int16, topic string, partition int32, offset int64, maxBytes int32, readCommitted bool) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = version, -1, 500, 1, 50<<20
	if readCommitted {
		req.IsolationLevel = 1
	}
	req.SessionEpoch = -1
	t := kmsg.NewFetchRequestTopic()
	t.Topic = topic
	p := kmsg.NewFetchRequestTopicPartition()
	p.Partition, p.FetchOffset, p.PartitionMaxBytes = partition, offset, maxBytes
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	return req
}
