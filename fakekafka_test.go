package kafkaconsumer

// A fake Kafka broker for the unit tests of the consumer group protocol's
// member (KIP-848) without a cluster: one broker on 127.0.0.1 that reads
// Kafka's wire protocol with franz-go's kmsg and answers what a member of
// GroupProtocolConsumer sends, on sarama's connections and on the group
// transport's (kgo): ApiVersions, Metadata (by name and by topic ID),
// FindCoordinator, ConsumerGroupHeartbeat (answered by the test's
// function), OffsetCommit, OffsetFetch, ListOffsets and Fetch (empty
// partitions, answered after the request's MaxWait). It records the
// requests, and a test may answer or hold any of them first (answer).

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fakeTopic is a topic of the fake broker.
type fakeTopic struct {
	id         [16]byte
	partitions int32
}

// fakeKafka is the fake broker. Safe for use by many goroutines.
type fakeKafka struct {
	t    *testing.T
	ln   net.Listener
	host string
	port int32
	// done is closed by close: held requests and Fetch waits end.
	done chan struct{}
	// conns counts the connections' goroutines; close waits for them.
	conns sync.WaitGroup

	mu sync.Mutex // guards the fields below
	// topics are the topics of the metadata, by name.
	topics map[string]fakeTopic
	// open are the connections, which close closes.
	open map[net.Conn]bool
	// heartbeat answers each ConsumerGroupHeartbeat; nil answers
	// NOT_COORDINATOR.
	heartbeat func(req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse
	// answer, when set, sees every request first: a non-nil response is
	// the answer (it may block: held requests).
	answer func(req kmsg.Request) kmsg.Response
	// requests are the requests received, in order.
	requests []kmsg.Request
	// committed are the offsets committed, by topic and partition.
	committed map[TopicPartition]int64
}

// newFakeKafka starts a fake broker with the given topics (name to
// partition count); it stops at the end of the test.
func newFakeKafka(t *testing.T, topics map[string]int32) *fakeKafka {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	f := &fakeKafka{t: t, ln: ln, host: "127.0.0.1", port: int32(addr.Port), done: make(chan struct{}),
		topics: map[string]fakeTopic{}, open: map[net.Conn]bool{}, committed: map[TopicPartition]int64{}}
	for name, n := range topics {
		f.addTopic(name, n)
	}
	f.conns.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

// addr returns the broker's address.
func (f *fakeKafka) addr() string { return net.JoinHostPort(f.host, strconv.Itoa(int(f.port))) }

// addTopic adds topic name of n partitions, its ID derived from its name.
func (f *fakeKafka) addTopic(name string, n int32) [16]byte {
	var id [16]byte
	copy(id[:], "id:"+name)
	f.mu.Lock()
	f.topics[name] = fakeTopic{id: id, partitions: n}
	f.mu.Unlock()
	return id
}

// topicID returns the ID of topic name (also of one not added: the ID
// it would have).
func topicID(name string) [16]byte {
	var id [16]byte
	copy(id[:], "id:"+name)
	return id
}

// setHeartbeat sets the function that answers ConsumerGroupHeartbeat.
func (f *fakeKafka) setHeartbeat(h func(req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse) {
	f.mu.Lock()
	f.heartbeat = h
	f.mu.Unlock()
}

// setAnswer sets the function that sees every request first.
func (f *fakeKafka) setAnswer(a func(req kmsg.Request) kmsg.Response) {
	f.mu.Lock()
	f.answer = a
	f.mu.Unlock()
}

// received returns the requests of key received so far.
func (f *fakeKafka) received(key int16) []kmsg.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []kmsg.Request
	for _, r := range f.requests {
		if r.Key() == key {
			out = append(out, r)
		}
	}
	return out
}

// count returns the count of requests received so far.
func (f *fakeKafka) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// close stops the broker and waits for its goroutines.
func (f *fakeKafka) close() {
	select {
	case <-f.done:
		return
	default:
	}
	close(f.done)
	_ = f.ln.Close()
	f.mu.Lock()
	for c := range f.open {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.conns.Wait()
}

// accept serves each connection on a goroutine of its own.
func (f *fakeKafka) accept() {
	defer f.conns.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		select {
		case <-f.done:
			f.mu.Unlock()
			_ = c.Close()
			return
		default:
		}
		f.open[c] = true
		f.conns.Add(1)
		f.mu.Unlock()
		go f.serve(c)
	}
}

// serve answers the requests of connection c in order, as a broker does.
func (f *fakeKafka) serve(c net.Conn) {
	defer f.conns.Done()
	defer func() { _ = c.Close() }()
	for {
		var size [4]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		frame := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(c, frame); err != nil {
			return
		}
		req, corr, err := parseRequest(frame)
		if err != nil {
			f.t.Errorf("fake kafka: %s", err)
			return
		}
		resp := f.handle(req)
		if resp == nil {
			return // closed meanwhile
		}
		out := make([]byte, 8, 64)
		binary.BigEndian.PutUint32(out[4:], uint32(corr))
		if resp.IsFlexible() && resp.Key() != 18 { // ApiVersions answers with header v0
			out = append(out, 0)
		}
		out = resp.AppendTo(out)
		binary.BigEndian.PutUint32(out, uint32(len(out)-4))
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// parseRequest decodes a request frame (without its size).
func parseRequest(b []byte) (kmsg.Request, int32, error) {
	if len(b) < 10 {
		return nil, 0, errors.New("short request header")
	}
	key, version := int16(binary.BigEndian.Uint16(b)), int16(binary.BigEndian.Uint16(b[2:]))
	corr := int32(binary.BigEndian.Uint32(b[4:]))
	req := kmsg.RequestForKey(key)
	if req == nil {
		return nil, corr, errors.New("unknown request key " + strconv.Itoa(int(key)))
	}
	req.SetVersion(version)
	n := int(int16(binary.BigEndian.Uint16(b[8:]))) // client ID, nullable
	b = b[10:]
	if n > 0 {
		b = b[n:]
	}
	if req.IsFlexible() { // header v2: tagged fields
		tags, read := binary.Uvarint(b)
		b = b[read:]
		for range tags {
			_, read = binary.Uvarint(b)
			b = b[read:]
			size, read := binary.Uvarint(b)
			b = b[read+int(size):]
		}
	}
	if err := req.ReadFrom(b); err != nil {
		return nil, corr, err
	}
	return req, corr, nil
}

// handle returns the answer to req; nil when the broker closed meanwhile.
func (f *fakeKafka) handle(req kmsg.Request) kmsg.Response {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	answer := f.answer
	f.mu.Unlock()
	if answer != nil {
		if resp := answer(req); resp != nil {
			resp.SetVersion(req.GetVersion())
			return resp
		}
	}
	select {
	case <-f.done:
		return nil
	default:
	}
	var resp kmsg.Response
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		resp = f.apiVersions()
	case *kmsg.MetadataRequest:
		resp = f.metadata(r)
	case *kmsg.FindCoordinatorRequest:
		resp = f.findCoordinator(r, 0)
	case *kmsg.ConsumerGroupHeartbeatRequest:
		f.mu.Lock()
		h := f.heartbeat
		f.mu.Unlock()
		if h == nil {
			a := kmsg.NewPtrConsumerGroupHeartbeatResponse()
			a.ErrorCode = kerr.NotCoordinator.Code
			resp = a
		} else {
			resp = h(r)
		}
	case *kmsg.OffsetCommitRequest:
		resp = f.offsetCommit(r)
	case *kmsg.OffsetFetchRequest:
		resp = f.offsetFetch(r)
	case *kmsg.ListOffsetsRequest:
		resp = fakeListOffsets(r)
	case *kmsg.FetchRequest:
		resp = f.fetch(r)
	default:
		resp = req.ResponseKind()
	}
	if resp == nil {
		return nil
	}
	resp.SetVersion(req.GetVersion())
	return resp
}

// apiVersions lists every request kmsg knows, at every version.
func (f *fakeKafka) apiVersions() kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	for key := range int16(kmsg.MaxKey + 1) {
		if r := kmsg.RequestForKey(key); r != nil {
			resp.ApiKeys = append(resp.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: key, MaxVersion: r.MaxVersion()})
		}
	}
	return resp
}

// metadata answers with this broker and the topics asked for (by name or
// ID; all for none), UNKNOWN_TOPIC_ID or UNKNOWN_TOPIC_OR_PARTITION for
// those it does not have.
func (f *fakeKafka) metadata(r *kmsg.MetadataRequest) kmsg.Response {
	resp := kmsg.NewPtrMetadataResponse()
	resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 1, Host: f.host, Port: f.port}}
	resp.ControllerID = 1
	cluster := "fake"
	resp.ClusterID = &cluster
	f.mu.Lock()
	defer f.mu.Unlock()
	topic := func(name string, t fakeTopic) kmsg.MetadataResponseTopic {
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic, rt.TopicID = &name, t.id
		for p := range t.partitions {
			rp := kmsg.NewMetadataResponseTopicPartition()
			rp.Partition, rp.Leader, rp.Replicas, rp.ISR = p, 1, []int32{1}, []int32{1}
			rt.Partitions = append(rt.Partitions, rp)
		}
		return rt
	}
	if r.Topics == nil {
		for name, t := range f.topics {
			resp.Topics = append(resp.Topics, topic(name, t))
		}
		return resp
	}
	for _, rt := range r.Topics {
		found := false
		for name, t := range f.topics {
			if rt.Topic != nil && *rt.Topic == name || rt.Topic == nil && rt.TopicID == t.id {
				resp.Topics = append(resp.Topics, topic(name, t))
				found = true
			}
		}
		if !found {
			missing := kmsg.NewMetadataResponseTopic()
			missing.Topic, missing.TopicID, missing.ErrorCode = rt.Topic, rt.TopicID, kerr.UnknownTopicOrPartition.Code
			if rt.Topic == nil {
				missing.ErrorCode = kerr.UnknownTopicID.Code
			}
			resp.Topics = append(resp.Topics, missing)
		}
	}
	return resp
}

// findCoordinator answers this broker, or code when not 0.
func (f *fakeKafka) findCoordinator(r *kmsg.FindCoordinatorRequest, code int16) *kmsg.FindCoordinatorResponse {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	resp.NodeID, resp.Host, resp.Port, resp.ErrorCode = 1, f.host, f.port, code
	for _, key := range r.CoordinatorKeys {
		resp.Coordinators = append(resp.Coordinators, kmsg.FindCoordinatorResponseCoordinator{
			Key: key, NodeID: 1, Host: f.host, Port: f.port, ErrorCode: code})
	}
	return resp
}

// offsetCommit records the offsets and accepts them.
func (f *fakeKafka) offsetCommit(r *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetCommitResponse()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			f.committed[TopicPartition{Topic: t.Topic, Partition: p.Partition}] = p.Offset
			rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// offsetFetch answers the offsets committed, -1 for none.
func (f *fakeKafka) offsetFetch(r *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetFetchResponse()
	f.mu.Lock()
	defer f.mu.Unlock()
	offset := func(topic string, p int32) int64 {
		if o, ok := f.committed[TopicPartition{Topic: topic, Partition: p}]; ok {
			return o
		}
		return -1
	}
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset = p, offset(t.Topic, p)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	for _, g := range r.Groups {
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group = g.Group
		for _, t := range g.Topics {
			rt := kmsg.NewOffsetFetchResponseGroupTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				rp.Partition, rp.Offset = p, offset(t.Topic, p)
				rt.Partitions = append(rt.Partitions, rp)
			}
			rg.Topics = append(rg.Topics, rt)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// fakeListOffsets answers offset 0 for every partition: the topics are empty.
func fakeListOffsets(r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := kmsg.NewPtrListOffsetsResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.Offset, rp.Timestamp, rp.OldStyleOffsets = p.Partition, 0, -1, []int64{0}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// fetch answers no records for every partition, after the request's
// MaxWait (at most a second), or nil once the broker closed.
func (f *fakeKafka) fetch(r *kmsg.FetchRequest) kmsg.Response {
	wait := time.NewTimer(min(time.Duration(r.MaxWaitMillis)*time.Millisecond, time.Second))
	defer wait.Stop()
	select {
	case <-wait.C:
	case <-f.done:
		return nil
	}
	resp := kmsg.NewPtrFetchResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.Partition, 0, 0, 0
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
