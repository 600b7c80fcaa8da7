package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// wire is the ceiling of the throughput workloads: no group, no decode.
// One connection per broker sends Fetch requests for every partition that
// broker leads, one request at a time, with the peers' fetch sizes
// (wireMaxWait, wirePartitionBytes, wireRequestBytes); each response is
// read into one reused buffer, framed (fetch.ReadResponse), and its
// record batches are counted from their headers, never decoded. Its
// msgs/s is the most that any consumer can take from these brokers on
// this machine.
const wire = "wire"

// The wire contender's Fetch sizes: sarama's Consumer.MaxWaitTime and
// Consumer.Fetch.Default (franz-go's FetchMaxPartitionBytes too), and
// franz-go's FetchMaxBytes (sarama's Consumer.Fetch.Max is unlimited).
const (
	wireMaxWait        = 500 * time.Millisecond
	wirePartitionBytes = 1 << 20
	wireRequestBytes   = 50 << 20
	// wireMaxVersion is the highest Fetch version wire sends: v13 names
	// topics by ID.
	wireMaxVersion = 12
)

// countFunc counts n messages of a partition, the last at offset last.
type countFunc func(topic string, partition int32, last, n int64)

// wireInstance is a running wire contender.
type wireInstance struct {
	client sarama.Client // metadata: the partitions' leaders
	conns  []*wireConn   // one per broker; Close closes them, which ends their loops
	wg     sync.WaitGroup
}

// wirePart is a partition of a wire loop's request.
type wirePart struct {
	topic     string
	partition int32
	offset    int64 // the next offset to fetch
}

// startWire starts share of spec.Instances wire instances (the partitions
// split as sarama-raw's), counting what it fetches with count.
func startWire(spec *childSpec, share int, count countFunc) (instance, error) {
	client, err := sarama.NewClient(spec.Brokers, sarama.NewConfig())
	if err != nil {
		return nil, err
	}
	w := &wireInstance{client: client}
	byLeader, err := wireLeaders(client, spec, share)
	if err != nil {
		client.Close()
		return nil, err
	}
	for leader, parts := range byLeader {
		c, version, err := dialWire(leader.Addr())
		if err == nil {
			w.conns = append(w.conns, c)
			err = c.startOffsets(parts, spec.Newest)
		}
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("wire: broker %d: %w", leader.ID(), err)
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			if err := c.loop(version, parts, count); !errors.Is(err, net.ErrClosed) {
				log.Printf("wire: broker %d: %v", leader.ID(), err)
			}
		}()
	}
	return w, nil
}

// wireLeaders returns the instance's partitions by their leader.
func wireLeaders(client sarama.Client, spec *childSpec, share int) (map[*sarama.Broker][]*wirePart, error) {
	out := map[*sarama.Broker][]*wirePart{}
	i := 0
	for ti, topic := range spec.Topics {
		for p := range spec.Partitions[ti] {
			if i%spec.Instances == share {
				leader, err := client.Leader(topic, p)
				if err != nil {
					return nil, fmt.Errorf("wire: leader of %s/%d: %w", topic, p, err)
				}
				out[leader] = append(out[leader], &wirePart{topic: topic, partition: p})
			}
			i++
		}
	}
	return out, nil
}

// Close closes the connections, which ends the loops, and waits for them.
func (w *wireInstance) Close() error {
	for _, c := range w.conns {
		c.conn.Close()
	}
	w.wg.Wait()
	return w.client.Close()
}

// wireConn is a connection to a broker that sends one request at a time
// and reads each response into the same buffer. Its loop's alone.
type wireConn struct {
	conn net.Conn
	f    *kmsg.RequestFormatter
	corr int32
	req  []byte // the last request, reused
	buf  []byte // the last response, reused
}

// dialWire connects to the broker at addr and returns the Fetch version
// to send it.
func dialWire(addr string) (*wireConn, int16, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, 0, err
	}
	c := &wireConn{conn: conn, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench-wire"))}
	versions := kmsg.NewPtrApiVersionsRequest() // v0: its response is the simplest
	body, err := c.send(versions)
	if err != nil {
		conn.Close()
		return nil, 0, err
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	if err := resp.ReadFrom(body); err != nil {
		conn.Close()
		return nil, 0, err
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == 1 { // Fetch
			return c, min(k.MaxVersion, wireMaxVersion), nil
		}
	}
	conn.Close()
	return nil, 0, fmt.Errorf("broker %s takes no Fetch request", addr)
}

// send sends req and returns the body of its response (after the
// response header), valid until the next send.
func (c *wireConn) send(req kmsg.Request) ([]byte, error) {
	c.corr++
	c.req = c.f.AppendRequest(c.req[:0], req, c.corr)
	if _, err := c.conn.Write(c.req); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(c.conn, size[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	if cap(c.buf) < n {
		c.buf = make([]byte, n)
	}
	c.buf = c.buf[:n]
	if _, err := io.ReadFull(c.conn, c.buf); err != nil {
		return nil, err
	}
	if n < 4 || int32(binary.BigEndian.Uint32(c.buf)) != c.corr {
		return nil, fmt.Errorf("response to request %d is not its answer", c.corr)
	}
	body := c.buf[4:]
	if req.IsFlexible() && req.Key() != 18 { // tagged fields in the header, but for ApiVersions'
		return fetchtest.SkipHeaderTags(body)
	}
	return body, nil
}

// startOffsets sets each partition's offset to its oldest (newest when
// newest) with one ListOffsets request (v1: neither flexible nor
// isolated).
func (c *wireConn) startOffsets(parts []*wirePart, newest bool) error {
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version, req.ReplicaID = 1, -1
	at := int64(-2) // oldest
	if newest {
		at = -1
	}
	byTopic := map[string]int{}
	for _, p := range parts {
		i, ok := byTopic[p.topic]
		if !ok {
			i = len(req.Topics)
			byTopic[p.topic] = i
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = p.topic
			req.Topics = append(req.Topics, t)
		}
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p.partition, at
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	body, err := c.send(req)
	if err != nil {
		return err
	}
	resp := kmsg.NewPtrListOffsetsResponse()
	resp.Version = req.Version
	if err := resp.ReadFrom(body); err != nil {
		return err
	}
	offsets := map[topicPartition]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := sarama.KError(p.ErrorCode); err != sarama.ErrNoError {
				return fmt.Errorf("list offsets of %s/%d: %w", t.Topic, p.Partition, err)
			}
			offsets[topicPartition{t.Topic, p.Partition}] = p.Offset
		}
	}
	for _, p := range parts {
		off, ok := offsets[topicPartition{p.topic, p.partition}]
		if !ok {
			return fmt.Errorf("list offsets: no answer for %s/%d", p.topic, p.partition)
		}
		p.offset = off
	}
	return nil
}

// topicPartition keys a partition.
type topicPartition struct {
	topic     string
	partition int32
}

// loop fetches parts until the connection fails: every request holds
// every partition at its next offset; each response's batches are
// counted. It returns the error that ended it (net.ErrClosed once Close
// closed the connection).
func (c *wireConn) loop(version int16, parts []*wirePart, count countFunc) error {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID = version, -1
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = int32(wireMaxWait/time.Millisecond), 1, wireRequestBytes
	req.SessionEpoch = -1 // no fetch session
	byTP := map[topicPartition]*wirePart{}
	var slots []*kmsg.FetchRequestTopicPartition // parts[i]'s, in req
	for _, p := range parts {
		byTP[topicPartition{p.topic, p.partition}] = p
		t := kmsg.NewFetchRequestTopic()
		t.Topic = p.topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes = p.partition, wirePartitionBytes
		rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.LogStartOffset = -1, -1, -1
		t.Partitions = append(t.Partitions, rp)
		req.Topics = append(req.Topics, t)
	}
	for i := range req.Topics {
		slots = append(slots, &req.Topics[i].Partitions[0])
	}
	for {
		for i, p := range parts {
			slots[i].FetchOffset = p.offset
		}
		body, err := c.send(req)
		if err != nil {
			return err
		}
		resp, err := fetch.ReadResponse(version, body)
		if err != nil {
			return err
		}
		for i := range resp.Partitions {
			rp := &resp.Partitions[i]
			p := byTP[topicPartition{rp.Topic, rp.Partition}]
			if p == nil {
				continue
			}
			if rp.Err != sarama.ErrNoError {
				return fmt.Errorf("%s/%d: %w", rp.Topic, rp.Partition, rp.Err)
			}
			n, next, err := countBatches(rp.Records)
			if err != nil {
				return fmt.Errorf("%s/%d: %w", rp.Topic, rp.Partition, err)
			}
			if next > p.offset {
				p.offset = next
				count(p.topic, p.partition, next-1, n)
			}
		}
	}
}

// The fields of a record batch's header (magic 2) that countBatches reads.
const (
	batchLengthAt     = 8  // int32, the bytes after it
	batchMagicAt      = 16 // int8
	batchAttributesAt = 21 // int16
	batchLastDeltaAt  = 23 // int32, lastOffsetDelta
	batchCountAt      = 57 // int32, the records
	batchHeaderSize   = 61
	batchControl      = 0x20 // attributes: a control batch (a transaction's marker)
)

// countBatches returns the records of the whole record batches of b,
// control batches left out, and the offset after the last batch (0 when
// b holds no whole batch). Legacy message sets are an error.
func countBatches(b []byte) (n, next int64, err error) {
	for len(b) >= batchHeaderSize {
		size := 12 + int(int32(binary.BigEndian.Uint32(b[batchLengthAt:])))
		if size > len(b) {
			break // cut short by the request's sizes
		}
		if magic := b[batchMagicAt]; magic != 2 {
			return 0, 0, fmt.Errorf("wire counts record batches only, not messages of magic %d", magic)
		}
		next = int64(binary.BigEndian.Uint64(b)) + int64(int32(binary.BigEndian.Uint32(b[batchLastDeltaAt:]))) + 1
		if binary.BigEndian.Uint16(b[batchAttributesAt:])&batchControl == 0 {
			n += int64(int32(binary.BigEndian.Uint32(b[batchCountAt:])))
		}
		b = b[size:]
	}
	return n, next, nil
}
