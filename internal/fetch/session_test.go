package fetch

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFetchSessionIdle: an idle consumer of many partitions (every
// partition at the end of its log) fetches them in an incremental fetch
// session (KIP-227, Fetch v7+): once the session holds them, its requests
// list none, where each request listed every partition again.
func TestFetchSessionIdle(t *testing.T) {
	peers := fetchtest.KafkaPeers(t)
	t.Parallel()
	const partitions = 200
	topic := fetchtest.Topic(t, fetchtest.Client(t, peers), partitions, nil)
	conf := sarama.NewConfig()
	conf.Version = fetchtest.KafkaVersion(t)
	conf.Consumer.MaxWaitTime = 100 * time.Millisecond
	version, _ := Version(conf)
	if version < 7 {
		t.Skip("fetch sessions need Fetch v7 (Kafka 1.1)")
	}
	client, err := sarama.NewClient(peers, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	hub := testHub(client, conf, version, &Budget{}, slog.New(slog.DiscardHandler))
	var mu sync.Mutex
	var listed []int // partitions listed by each request, in order
	hub.requested = func(req *kmsg.FetchRequest) {
		n := 0
		for _, topic := range req.Topics {
			n += len(topic.Partitions)
		}
		mu.Lock()
		listed = append(listed, n)
		mu.Unlock()
	}
	defer hub.Close()
	var fetchers []*Fetcher
	for p := range int32(partitions) {
		f := hub.Start(topic, p, 0)
		defer func() { _ = f.Close() }()
		fetchers = append(fetchers, f)
	}
	defer func() {
		for _, f := range fetchers {
			select {
			case err := <-f.errs:
				t.Errorf("%s/%d reported %v", f.tp.Topic, f.tp.Partition, err)
				return
			default:
			}
		}
	}()
	lastEmpty := func() bool { // the last three requests listed no partition
		mu.Lock()
		defer mu.Unlock()
		n := len(listed)
		return n >= 3 && listed[n-1] == 0 && listed[n-2] == 0 && listed[n-3] == 0
	}
	if !fetchtest.Poll(30*time.Second, lastEmpty) {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d requests in 30 s, the last listing %v partitions: no idle request is empty", len(listed), listed[max(len(listed)-5, 0):])
	}
}

// TestFetchSessionStates: a loop's first request is full and asks for a
// session; once the broker gave one, requests list only what changed and
// forget what left; a session error (FETCH_SESSION_ID_NOT_FOUND,
// INVALID_FETCH_SESSION_EPOCH), a failed request or one cut short make
// the next request full again, closing the session (its ID with epoch 0)
// unless the broker no longer knows it.
func TestFetchSessionStates(t *testing.T) {
	t.Parallel()
	var s fetchSession
	a, b := TopicPartition{"t", 0}, TopicPartition{"t", 1}
	at := func(offset int64) sessionPart { return sessionPart{offset: offset, maxBytes: 1 << 20, epoch: -1} }
	request := func(parts map[TopicPartition]sessionPart) (listed []TopicPartition, forgotten int, id, epoch int32) {
		t.Helper()
		s.begin(12)
		id, epoch = s.id, s.epoch
		ready := make(map[TopicPartition]struct{})
		for _, tp := range []TopicPartition{a, b} {
			if p, ok := parts[tp]; ok {
				ready[tp] = struct{}{}
				if s.lists(tp, p) {
					listed = append(listed, tp)
				}
			}
		}
		req := kmsg.NewPtrFetchRequest()
		s.forget(req, ready)
		for _, topic := range req.ForgottenTopics {
			forgotten += len(topic.Partitions)
		}
		return listed, forgotten, id, epoch
	}
	check := func(what string, listed []TopicPartition, forgotten int, id, epoch int32, wantListed, wantForgotten int, wantID, wantEpoch int32) {
		t.Helper()
		if len(listed) != wantListed || forgotten != wantForgotten || id != wantID || epoch != wantEpoch {
			t.Errorf("%s: %d listed, %d forgotten, session %d epoch %d; want %d, %d, %d, %d", what, len(listed), forgotten, id, epoch, wantListed, wantForgotten, wantID, wantEpoch)
		}
	}
	l, f, id, epoch := request(map[TopicPartition]sessionPart{a: at(0), b: at(0)})
	check("first", l, f, id, epoch, 2, 0, 0, 0)
	s.answered(7)
	l, f, id, epoch = request(map[TopicPartition]sessionPart{a: at(0), b: at(0)})
	check("idle", l, f, id, epoch, 0, 0, 7, 1)
	s.answered(7)
	l, f, id, epoch = request(map[TopicPartition]sessionPart{a: at(5)})
	check("a moved, b left", l, f, id, epoch, 1, 1, 7, 2)
	s.answered(7)
	if len(s.parts) != 1 || s.parts[a] != at(5) {
		t.Errorf("the session holds %v, want a at 5", s.parts)
	}
	if !s.sessionError(sarama.ErrInvalidFetchSessionEpoch) {
		t.Fatal("INVALID_FETCH_SESSION_EPOCH is no session error")
	}
	l, f, id, epoch = request(map[TopicPartition]sessionPart{a: at(5), b: at(0)})
	check("after INVALID_FETCH_SESSION_EPOCH", l, f, id, epoch, 2, 0, 7, 0)
	s.answered(8)
	if !s.sessionError(sarama.ErrFetchSessionIDNotFound) {
		t.Fatal("FETCH_SESSION_ID_NOT_FOUND is no session error")
	}
	l, f, id, epoch = request(map[TopicPartition]sessionPart{a: at(5), b: at(0)})
	check("after FETCH_SESSION_ID_NOT_FOUND", l, f, id, epoch, 2, 0, 0, 0)
	s.answered(9)
	s.lost()
	l, f, id, epoch = request(map[TopicPartition]sessionPart{a: at(5), b: at(0)})
	check("after a failed request", l, f, id, epoch, 2, 0, 9, 0)
	s.answered(0) // no room for a session
	l, f, id, epoch = request(map[TopicPartition]sessionPart{a: at(5), b: at(0)})
	check("without a session", l, f, id, epoch, 2, 0, 0, 0)
	if s.sessionError(sarama.ErrNotLeaderForPartition) {
		t.Error("NOT_LEADER_FOR_PARTITION taken for a session error")
	}
}
