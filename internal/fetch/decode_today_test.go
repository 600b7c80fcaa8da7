package fetch

// internal/fetch's decoder against what the engine does today (sarama's
// decode of the whole response, then parse): the same messages from the
// same responses, and the cost of each.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
)

// replayConn is a connection to a broker that answers every request with
// one response body: sarama's Broker reads it as a broker's. In memory:
// the only cost of a request is sarama's.
type replayConn struct {
	mu     sync.Mutex
	cond   *sync.Cond
	frame  []byte // the response: size, correlation ID, tagged fields (flexible), body
	in     []byte // request bytes not answered yet
	out    []byte // response bytes not read yet
	closed bool
}

func newReplayConn(body []byte, flexible bool) *replayConn {
	header := 4
	if flexible {
		header++
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(header+len(body)))
	frame = append(frame, 0, 0, 0, 0)
	if flexible {
		frame = append(frame, 0) // no tagged fields
	}
	c := &replayConn{frame: append(frame, body...)}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *replayConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.in = append(c.in, p...)
	for len(c.in) >= 12 {
		size := int(binary.BigEndian.Uint32(c.in))
		if len(c.in) < 4+size {
			break
		}
		copy(c.frame[4:8], c.in[8:12]) // the correlation ID; the last response was read whole
		c.out = c.frame
		c.in = c.in[:copy(c.in, c.in[4+size:])]
		c.cond.Broadcast()
	}
	return len(p), nil
}

func (c *replayConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.out) == 0 && !c.closed {
		c.cond.Wait()
	}
	if len(c.out) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

func (c *replayConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.cond.Broadcast()
	return nil
}

func (c *replayConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *replayConn) SetDeadline(t time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(t time.Time) error { return nil }

type replayDialer struct{ conn *replayConn }

func (d replayDialer) Dial(network, addr string) (net.Conn, error) { return d.conn, nil }

// replayBroker returns a sarama Broker whose every Fetch is answered with
// body, a response of Fetch version.
func replayBroker(tb testing.TB, version int16, body []byte) *sarama.Broker {
	tb.Helper()
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_7_0_0
	conf.ApiVersionsRequest = false
	conf.Net.Proxy.Enable, conf.Net.Proxy.Dialer = true, replayDialer{newReplayConn(body, version >= 12)}
	b := sarama.NewBroker("replay:9092")
	if err := b.Open(conf); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = b.Close() })
	return b
}

// saramaFetch sends one Fetch request for topic "t", partition 3, from
// offset, and returns sarama's decode of the answer.
func saramaFetch(tb testing.TB, b *sarama.Broker, version int16, offset int64, isolation sarama.IsolationLevel) *sarama.FetchResponse {
	tb.Helper()
	req := &sarama.FetchRequest{Version: version, MaxBytes: 50 << 20, Isolation: isolation}
	req.AddBlock("t", 3, offset, 50<<20, -1)
	resp, err := b.Fetch(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

// todaysMessages returns what sarama makes of resp: saramaParse's
// messages, size and next offset (sarama's parseMessages for legacy
// message sets, which its partition consumer decodes).
func todaysMessages(tb testing.TB, resp *sarama.FetchResponse, offset int64, isolation sarama.IsolationLevel) ([]*sarama.ConsumerMessage, int64, int64) {
	tb.Helper()
	var tp TopicPartition
	var block *sarama.FetchResponseBlock
	for topic, blocks := range resp.Blocks {
		for partition, b := range blocks {
			tp, block = TopicPartition{topic, partition}, b
		}
	}
	if block == nil || len(resp.Blocks) != 1 || len(resp.Blocks[tp.Topic]) != 1 {
		tb.Fatalf("sarama's response holds %d topics, want one partition", len(resp.Blocks))
	}
	f := testFetcher(offset)
	f.tp = tp
	f.hub.conf.Consumer.IsolationLevel = isolation
	msgs, size, _, err := f.saramaParse(block)
	if err == errSaramaLegacy {
		msgs, next := saramaLegacyMessages(tp, block, offset)
		return msgs, -1, next
	}
	if err != nil {
		tb.Fatalf("saramaParse: %v", err)
	}
	return msgs, size, f.offset
}

// saramaLegacyMessages is sarama's partitionConsumer.parseMessages
// (consumer.go, v1.61.1) over the message sets of block, from offset.
func saramaLegacyMessages(tp TopicPartition, block *sarama.FetchResponseBlock, offset int64) ([]*sarama.ConsumerMessage, int64) {
	var msgs []*sarama.ConsumerMessage
	for _, records := range block.RecordsSet {
		if records.MsgSet == nil {
			continue
		}
		for _, msgBlock := range records.MsgSet.Messages {
			inner := msgBlock.Messages()
			for _, msg := range inner {
				o, ts := msg.Offset, msg.Msg.Timestamp
				if msg.Msg.Version >= 1 {
					o += msgBlock.Offset - inner[len(inner)-1].Offset
					if msg.Msg.LogAppendTime {
						ts = msgBlock.Msg.Timestamp
					}
				}
				if o < offset {
					continue
				}
				msgs = append(msgs, &sarama.ConsumerMessage{Topic: tp.Topic, Partition: tp.Partition, Key: msg.Msg.Key, Value: msg.Msg.Value,
					Offset: o, Timestamp: ts, BlockTimestamp: msgBlock.Msg.Timestamp})
				offset = o + 1
			}
		}
	}
	return msgs, offset
}

// newDecode returns what internal/fetch makes of body.
func newDecode(tb testing.TB, version int16, body []byte, offset int64, readCommitted bool) Records {
	tb.Helper()
	resp, err := ReadResponse(version, body)
	if err != nil {
		tb.Fatal(err)
	}
	r, err := Decode(&resp.Partitions[0], offset, readCommitted)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func TestDecodeAsToday(t *testing.T) {
	t.Parallel()
	recs := func(base int64, n int) []fetchtest.Record {
		out := make([]fetchtest.Record, n)
		for i := range out {
			out[i] = fetchtest.Record{OffsetDelta: int32(i), TimestampDelta: int64(3 * i), Key: fmt.Appendf(nil, "k%d", base+int64(i)), Value: fmt.Appendf(nil, "v%d", base+int64(i))}
		}
		return out
	}
	odd := recs(0, 4)
	odd[1].Key, odd[2].Value = nil, []byte{}
	odd[3].Headers = []fetchtest.Header{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: nil}}
	batches := func(bs ...fetchtest.Batch) []byte {
		var out []byte
		for _, b := range bs {
			out = b.AppendTo(out)
		}
		return out
	}
	legacy := func(magic int8, codec int8) []byte {
		var out []byte
		for w := range 2 {
			wrapper := fetchtest.Message{Offset: 1 + 2*int64(w), Magic: magic, Codec: codec, Timestamp: 5000 + int64(w)}
			for i := 2 * w; i < 2*w+2; i++ {
				m := fetchtest.Message{Offset: int64(i), Magic: magic, Timestamp: 4000 + int64(i), Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
				if codec == fetchtest.None {
					out = m.AppendTo(out)
					continue
				}
				if magic == 1 {
					m.Offset -= int64(2 * w)
				}
				wrapper.Inner = append(wrapper.Inner, m)
			}
			if codec != fetchtest.None {
				out = wrapper.AppendTo(out)
			}
		}
		return out
	}
	const ts = 1_700_000_000_000
	for _, tc := range []struct {
		name      string
		records   []byte
		offset    int64
		committed bool
		aborted   [][2]int64
	}{
		{"plain", batches(fetchtest.Batch{FirstTimestamp: ts, Records: odd}, fetchtest.Batch{BaseOffset: 4, FirstTimestamp: ts, Records: recs(4, 3)}), 0, false, nil},
		{"gzip", batches(fetchtest.Batch{Codec: fetchtest.Gzip, FirstTimestamp: ts, Records: odd}), 0, false, nil},
		{"snappy", batches(fetchtest.Batch{Codec: fetchtest.Snappy, FirstTimestamp: ts, Records: odd}), 0, false, nil},
		{"snappy xerial", batches(fetchtest.Batch{Codec: fetchtest.Snappy, Xerial: true, FirstTimestamp: ts, Records: odd}), 0, false, nil},
		{"lz4", batches(fetchtest.Batch{Codec: fetchtest.LZ4, FirstTimestamp: ts, Records: odd}), 0, false, nil},
		{"zstd", batches(fetchtest.Batch{Codec: fetchtest.Zstd, FirstTimestamp: ts, Records: odd}), 0, false, nil},
		{"log append time", batches(fetchtest.Batch{LogAppendTime: true, FirstTimestamp: ts, MaxTimestamp: ts + 99, Records: odd}), 0, false, nil},
		{"no timestamp", batches(fetchtest.Batch{FirstTimestamp: -1, MaxTimestamp: -1, Records: odd}), 0, false, nil},
		{"mid-batch", batches(fetchtest.Batch{FirstTimestamp: ts, Records: recs(0, 5)}, fetchtest.Batch{BaseOffset: 5, Records: recs(5, 2)}), 3, false, nil},
		{"compacted empty", batches(fetchtest.Batch{BaseOffset: 0, LastOffsetDelta: 9}), 0, false, nil},
		{"compacted empty, then records", batches(fetchtest.Batch{BaseOffset: 0, LastOffsetDelta: 9}, fetchtest.Batch{BaseOffset: 10, Records: recs(10, 2)}), 0, false, nil},
		{"truncated", batches(fetchtest.Batch{Records: recs(0, 3)}, fetchtest.Batch{BaseOffset: 3, Records: recs(3, 30)})[:200], 0, false, nil},
		{"read_committed", batches(
			fetchtest.Batch{Transactional: true, ProducerID: 7, Records: recs(0, 2)},
			fetchtest.Batch{BaseOffset: 2, Transactional: true, ProducerID: 8, Records: recs(2, 2)},
			fetchtest.ControlBatch(4, 7, true), fetchtest.ControlBatch(5, 8, false),
			fetchtest.Batch{BaseOffset: 6, Transactional: true, ProducerID: 7, Records: recs(6, 2)},
			fetchtest.ControlBatch(8, 7, false)), 0, true, [][2]int64{{7, 0}}},
		{"magic 0", legacy(0, fetchtest.None), 1, false, nil},
		{"magic 0 gzip", legacy(0, fetchtest.Gzip), 1, false, nil},
		{"magic 1", legacy(1, fetchtest.None), 1, false, nil},
		{"magic 1 gzip", legacy(1, fetchtest.Gzip), 1, false, nil},
		{"magic 1 snappy", legacy(1, fetchtest.Snappy), 1, false, nil},
		{"magic 1 lz4", legacy(1, fetchtest.LZ4), 1, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const version = 12
			body := fetchtest.Response(version, 0, fetchtest.Partition{Topic: "t", Partition: 3, HighWatermark: 100, LastStableOffset: 100,
				LogStartOffset: 0, PreferredReadReplica: -1, Aborted: tc.aborted, Records: tc.records})
			isolation := sarama.ReadUncommitted
			if tc.committed {
				isolation = sarama.ReadCommitted
			}
			resp := saramaFetch(t, replayBroker(t, version, body), version, tc.offset, isolation)
			today, size, next := todaysMessages(t, resp, tc.offset, isolation)
			got := newDecode(t, version, body, tc.offset, tc.committed)
			t.Logf("%d messages, next %d", len(today), next)
			assertSameMessages(t, today, got.Messages)
			if got.Next != next {
				t.Errorf("next offset %d, today's %d", got.Next, next)
			}
			if size >= 0 && got.Bytes+int64(len(got.Messages))*MessageOverhead != size {
				t.Errorf("Bytes %d and %d messages, today's size %d", got.Bytes, len(got.Messages), size)
			}
		})
	}
}

// assertSameMessages fails t unless the messages are equal, field by
// field, nil and empty told apart.
func assertSameMessages(t *testing.T, today, got []*sarama.ConsumerMessage) {
	t.Helper()
	if len(got) != len(today) {
		t.Fatalf("%d messages, today %d", len(got), len(today))
	}
	for i := range today {
		a, b := *today[i], *got[i]
		if !reflect.DeepEqual(a, b) || (a.Key == nil) != (b.Key == nil) || (a.Value == nil) != (b.Value == nil) || (a.Headers == nil) != (b.Headers == nil) {
			t.Errorf("message %d:\n got   %s\n today %s", i, describeMessage(&b), describeMessage(&a))
		}
	}
}

func describeMessage(m *sarama.ConsumerMessage) string {
	var hs bytes.Buffer
	for _, h := range m.Headers {
		fmt.Fprintf(&hs, "%q=%q(nil %t) ", h.Key, h.Value, h.Value == nil)
	}
	return fmt.Sprintf("%s/%d@%d key %q(nil %t) value %q(nil %t) ts %s block %s headers[nil %t] %s", m.Topic, m.Partition, m.Offset,
		m.Key, m.Key == nil, m.Value, m.Value == nil, m.Timestamp, m.BlockTimestamp, m.Headers == nil, hs.String())
}

// brokerFetchVersion returns the highest Fetch version of the test
// cluster's first broker, up to 12 (Kafka 1.1: 7).
func brokerFetchVersion(t *testing.T) int16 {
	t.Helper()
	c, err := fetchtest.Dial(fetchtest.KafkaPeers(t)[0])
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_, version, err := c.Versions(1)
	if err != nil {
		t.Fatal(err)
	}
	return min(version, 12)
}

// rawFetchOf returns the body of a Fetch response of version for the
// first MiB of topic's partition 0, from its leader.
func rawFetchOf(t *testing.T, client sarama.Client, version int16, topic string, committed bool) []byte {
	t.Helper()
	leader, err := client.Leader(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := fetchtest.Dial(leader.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	body, err := c.Send(fetchtest.FetchRequest(version, topic, 0, 0, 1<<20, committed))
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestDecodeAsTodayBroker is TestDecodeAsToday on records the test
// cluster wrote: every codec, and a transactional producer's committed
// and aborted transactions read committed and uncommitted. Each Fetch
// response is fetched raw once, then decoded both ways.
func TestDecodeAsTodayBroker(t *testing.T) {
	peers := fetchtest.KafkaPeers(t)
	t.Parallel()
	client := fetchtest.Client(t, peers)
	kafka := fetchtest.KafkaVersion(t)
	version := brokerFetchVersion(t)
	rawFetch := func(t *testing.T, topic string, committed bool) []byte {
		return rawFetchOf(t, client, version, topic, committed)
	}
	compare := func(t *testing.T, body []byte, from int64, committed bool) int {
		isolation := sarama.ReadUncommitted
		if committed {
			isolation = sarama.ReadCommitted
		}
		resp := saramaFetch(t, replayBroker(t, version, body), version, from, isolation)
		today, size, next := todaysMessages(t, resp, from, isolation)
		got := newDecode(t, version, body, from, committed)
		assertSameMessages(t, today, got.Messages)
		if got.Next != next || got.Bytes+int64(len(got.Messages))*MessageOverhead != size {
			t.Errorf("from %d: next %d, size %d; today's %d, %d", from, got.Next, got.Bytes+int64(len(got.Messages))*MessageOverhead, next, size)
		}
		return len(got.Messages)
	}
	for _, codec := range []sarama.CompressionCodec{sarama.CompressionNone, sarama.CompressionGZIP, sarama.CompressionSnappy, sarama.CompressionLZ4, sarama.CompressionZSTD} {
		t.Run(codec.String(), func(t *testing.T) {
			if codec == sarama.CompressionZSTD && version < 10 {
				t.Skip("zstd needs Kafka 2.1 (Fetch v10)")
			}
			topic := fetchtest.Topic(t, client, 1, nil)
			fetchtest.ProduceCompressed(t, peers, kafka, topic, 1, 50, codec)
			body := rawFetch(t, topic, false)
			for _, from := range []int64{0, 15} {
				if n := compare(t, body, from, false); n != 50-int(from) {
					t.Errorf("from %d: %d messages, want %d", from, n, 50-from)
				}
			}
		})
	}
	t.Run("transactions", func(t *testing.T) {
		topic := fetchtest.Topic(t, client, 1, nil)
		committed, aborted := fetchtest.ProduceTransactions(t, peers, kafka, "txn-"+topic, topic, 1)
		if n := compare(t, rawFetch(t, topic, true), 0, true); n != len(committed) {
			t.Errorf("read committed: %d messages, want %d", n, len(committed))
		}
		if n := compare(t, rawFetch(t, topic, false), 0, false); n != len(committed)+len(aborted) {
			t.Errorf("read uncommitted: %d messages, want %d", n, len(committed)+len(aborted))
		}
	})
}
