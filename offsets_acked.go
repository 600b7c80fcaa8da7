package kafkaconsumer

// The acked sets (Config.DurableAcks) that the offset store's fetch reads
// with the committed offsets, kept until the partition that starts at
// them takes them (takeAcked).

import "github.com/kafkaconsumer/kafkaconsumer/internal/commitmark"

// ackedSet is the acked set of a committed offset, or why it could not be
// read.
type ackedSet struct {
	ranges []commitmark.Range
	err    error // wraps commitmark.ErrMalformed
}

// keepAcked keeps the acked set that metadata, committed with the next
// offset next, carries for tp, with Config.DurableAcks; a commit
// without one (or without DurableAcks) leaves nothing. s.mu is held.
func (s *offsetStore) keepAcked(tp TopicPartition, metadata string, next int64) {
	if !s.durable {
		delete(s.acked, tp)
		return
	}
	ranges, err := commitmark.Acked(metadata, next)
	if ranges == nil && err == nil {
		delete(s.acked, tp)
		return
	}
	s.acked[tp] = ackedSet{ranges: ranges, err: err}
}

// takeAcked returns the acked set of tp that fetch read with its committed
// offset (nil for none, and without Config.DurableAcks), once; err tells
// why a set that the commit carries could not be read (the set is nil
// then).
func (s *offsetStore) takeAcked(tp TopicPartition) (ranges []commitmark.Range, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.acked[tp]
	delete(s.acked, tp)
	return set.ranges, set.err
}
