package fetch

// A broker loop's incremental fetch session (KIP-227, Fetch v7+): the
// broker keeps the partitions of the loop's requests and their fetch
// offsets, and each request after the first lists only the partitions
// that changed (a new fetch offset, size or leader epoch) and those it
// leaves (forgotten), so that an idle loop of many partitions sends and
// receives next to nothing. A response of such a request holds only the
// partitions with news.

import (
	"math"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchSession is a loop's fetch session with its broker. The loop
// goroutine's.
type fetchSession struct {
	// id is the session's (0: none), and epoch that of the next request:
	// 0 is a full fetch, which asks for a new session (closing id's).
	id, epoch int32
	// parts is what the broker's session holds of each partition.
	parts map[TopicPartition]sessionPart
	// incremental tells whether the request in flight is incremental;
	// sent holds the partitions it lists, and forgotten those it leaves.
	incremental bool
	sent        map[TopicPartition]sessionPart
	forgotten   []TopicPartition
}

// sessionPart is what a request told the broker of a partition.
type sessionPart struct {
	offset   int64
	maxBytes int32
	epoch    int32
}

// begin starts the session's part of the next request: incremental when
// a session is open and the request may carry it (version, the highest
// Fetch version of the loop's hub, is 7 or more).
func (s *fetchSession) begin(version int16) {
	s.incremental = version >= 7 && s.id != 0 && s.epoch > 0
	if s.sent == nil {
		s.sent = make(map[TopicPartition]sessionPart)
	}
	clear(s.sent)
	s.forgotten = s.forgotten[:0]
}

// lists reports whether the request lists tp, asking for want of it, and
// notes it: an incremental request lists only what the session does not
// hold already.
func (s *fetchSession) lists(tp TopicPartition, want sessionPart) bool {
	if have, ok := s.parts[tp]; s.incremental && ok && have == want {
		return false
	}
	s.sent[tp] = want
	return true
}

// forget sets the request's forgotten partitions: those of the session
// that ready (the partitions of the request) does not hold. A full
// request forgets nothing: it replaces the session's partitions.
func (s *fetchSession) forget(req *kmsg.FetchRequest, ready map[TopicPartition]struct{}) {
	if !s.incremental {
		return
	}
	topics := make(map[string]int) // index in req.ForgottenTopics
	for tp := range s.parts {
		if _, ok := ready[tp]; ok {
			continue
		}
		s.forgotten = append(s.forgotten, tp)
		i, ok := topics[tp.Topic]
		if !ok {
			i = len(req.ForgottenTopics)
			topics[tp.Topic] = i
			t := kmsg.NewFetchRequestForgottenTopic()
			t.Topic = tp.Topic
			req.ForgottenTopics = append(req.ForgottenTopics, t)
		}
		req.ForgottenTopics[i].Partitions = append(req.ForgottenTopics[i].Partitions, tp.Partition)
	}
}

// answered records the response of the request, whose session is id: a
// full request's partitions become the session's, an incremental one's
// change it, and the epoch moves on. A full request that the broker gave
// no session (id 0: no room in its cache) is followed by another.
func (s *fetchSession) answered(id int32) {
	if !s.incremental {
		s.parts, s.sent = s.sent, s.parts
		s.id, s.epoch = id, 0
		if id != 0 {
			s.epoch = 1
		}
		return
	}
	for tp, p := range s.sent {
		s.parts[tp] = p
	}
	for _, tp := range s.forgotten {
		delete(s.parts, tp)
	}
	s.epoch++
	if s.epoch == math.MaxInt32 {
		s.epoch = 1 // as Kafka's epochs wrap
	}
}

// lost tells that the request failed, was cut short or was refused for its
// session: what the broker holds is not known, and the next request is a
// full one, which closes the session and opens another.
func (s *fetchSession) lost() {
	s.epoch = 0
	clear(s.parts)
}

// sessionError reports whether err, a response's own error, is one of the
// session (FETCH_SESSION_ID_NOT_FOUND: the broker evicted it,
// INVALID_FETCH_SESSION_EPOCH), after which a full request opens another;
// it forgets the session.
func (s *fetchSession) sessionError(err sarama.KError) bool {
	switch err {
	case sarama.ErrFetchSessionIDNotFound:
		s.id = 0
	case sarama.ErrInvalidFetchSessionEpoch:
	default:
		return false
	}
	s.lost()
	return true
}
