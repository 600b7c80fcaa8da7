package kafkaconsumer

// The group's coordinator as this instance knows it: one broker for every
// request of the group (JoinGroup, SyncGroup, LeaveGroup, Heartbeat,
// OffsetCommit, OffsetFetch, DescribeGroups), looked up through the
// offset client, forgotten by broker ID when a request to it fails or an
// answer says it is not the coordinator (coordinatorMoved), and looked up
// again after a backoff that grows while the lookups keep finding a
// broker that refuses, as Kafka's AbstractCoordinator.markCoordinatorUnknown
// does.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// coordinatorCache is the group's coordinator of an offsetStore.
type coordinatorCache struct {
	brokerMu    sync.Mutex     // guards the fields below
	coordinator *sarama.Broker // nil until looked up, and after forget
	// forgets counts the coordinators forgotten in a row, each served
	// less than maxLookupBackoff: the backoff before the next lookup.
	forgets int
	// foundAt is when the coordinator was looked up; lookupAt the
	// earliest time of the next lookup.
	foundAt, lookupAt time.Time
	// noLookup is set when a Shutdown's context ended: a coordinator that
	// is not known is not looked up any more. A lookup retries every
	// broker Metadata.Retry.Max times, each up to three Net.ReadTimeout
	// against a hung broker (a dial, ApiVersions twice, FindCoordinator),
	// and only cutting the connections under it (closeKafka) ends it.
	noLookup atomic.Bool
}

// minLookupBackoff and maxLookupBackoff bound the wait before a lookup of
// the coordinator after one was forgotten: it doubles with each
// coordinator forgotten in a row (Kafka's retry.backoff.ms and
// retry.backoff.max.ms).
const (
	minLookupBackoff = 100 * time.Millisecond
	maxLookupBackoff = time.Second
)

// errNoLookup is what broker returns when the coordinator is not known
// and noLookup is set.
var errNoLookup = errors.New("the group's coordinator is not known, and the shutdown's deadline has passed")

// coordinatorMoved reports whether err, an answer of the group's
// coordinator, means that it is not the coordinator (any more, or yet):
// NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
// COORDINATOR_LOAD_IN_PROGRESS. The request goes again to the
// coordinator looked up afresh.
func coordinatorMoved(err error) bool {
	return errors.Is(err, sarama.ErrNotCoordinatorForConsumer) ||
		errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) ||
		errors.Is(err, sarama.ErrOffsetsLoadInProgress)
}

// broker returns the group's coordinator, looking it up when not known
// (after the backoff of forget). Safe from any goroutine.
func (s *offsetStore) broker() (*sarama.Broker, error) {
	// The flag is read once: whichever way it changes meanwhile, the
	// mutex is locked exactly once here.
	if s.noLookup.Load() {
		if !s.brokerMu.TryLock() {
			return nil, errNoLookup // a lookup is under way, and may last
		}
	} else {
		s.brokerMu.Lock()
	}
	defer s.brokerMu.Unlock()
	if s.coordinator != nil {
		return s.coordinator, nil
	}
	if s.noLookup.Load() {
		return nil, errNoLookup
	}
	if wait := time.Until(s.lookupAt); wait > 0 {
		timer := time.NewTimer(wait) // at most maxLookupBackoff
		<-timer.C
	}
	if err := s.client.RefreshCoordinator(s.group); err != nil {
		return nil, err
	}
	broker, err := s.client.Coordinator(s.group)
	if err != nil {
		return nil, err
	}
	s.coordinator, s.foundAt = broker, time.Now()
	return broker, nil
}

// forget forgets the coordinator when it is the broker id, after a
// request to it failed or it answered coordinatorMoved, so that the next
// request looks the coordinator up again, minLookupBackoff later,
// doubling up to maxLookupBackoff while each coordinator found is
// forgotten within maxLookupBackoff. Safe from any goroutine.
func (s *offsetStore) forget(id int32) {
	s.brokerMu.Lock()
	defer s.brokerMu.Unlock()
	if s.coordinator == nil || s.coordinator.ID() != id {
		return // forgotten already, or another one looked up since
	}
	s.coordinator = nil
	if time.Since(s.foundAt) > maxLookupBackoff {
		s.forgets = 0
	}
	s.lookupAt = time.Now().Add(min(minLookupBackoff<<s.forgets, maxLookupBackoff))
	s.forgets = min(s.forgets+1, 4)
}

// brokerName names broker b in log lines and errors: its ID and address.
func brokerName(b *sarama.Broker) string {
	return fmt.Sprintf("broker %d (%s)", b.ID(), b.Addr())
}
