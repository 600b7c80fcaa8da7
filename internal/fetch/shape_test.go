package fetch

import (
	"slices"
	"testing"

	"github.com/IBM/sarama"
)

// TestBrokerLoopRequestShape: a request spreads its MaxBytes over its
// partitions (each an equal share, at least partitionFloor, at most its
// fetch size unless that grew past Fetch.Default for a batch cut short),
// and the order of its partitions turns by one at every request, so that
// the broker, which fills a response in request order, serves each
// partition in turn. The request asked each partition for its whole fetch
// size in the same order every time: of 8 partitions of a busy broker,
// the first 2 filled every response.
func TestBrokerLoopRequestShape(t *testing.T) {
	t.Parallel()
	conf := sarama.NewConfig()
	hub := &Hub{conf: conf, budget: &Budget{}}
	l := &brokerLoop{hub: hub}
	var ready []*Fetcher
	for p := range int32(4) {
		ready = append(ready, &Fetcher{hub: hub, tp: TopicPartition{"t", p}, fetchSize: conf.Consumer.Fetch.Default, epoch: -1})
	}
	shape := func(maxBytes int32) (order []int32, sizes []int32) {
		req, _ := l.request(ready, maxBytes)
		for _, topic := range req.Topics {
			for _, p := range topic.Partitions {
				order, sizes = append(order, p.Partition), append(sizes, p.PartitionMaxBytes)
			}
		}
		return order, sizes
	}
	order, sizes := shape(400 << 10)
	if !slices.Equal(sizes, []int32{100 << 10, 100 << 10, 100 << 10, 100 << 10}) {
		t.Errorf("MaxBytes 400 KiB over 4 partitions: partition max bytes %v, want 100 KiB each", sizes)
	}
	next, _ := shape(400 << 10)
	if want := append(order[1:len(order):len(order)], order[0]); !slices.Equal(next, want) {
		t.Errorf("the order of the next request %v, want %v (the last one's %v turned by one)", next, want, order)
	}
	if _, sizes := shape(1000); sizes[0] != partitionFloor {
		t.Errorf("a share below the floor: %d, want partitionFloor, %d", sizes[0], partitionFloor)
	}
	if _, sizes := shape(100 << 20); sizes[0] != conf.Consumer.Fetch.Default {
		t.Errorf("a share above the fetch size: %d, want Fetch.Default, %d", sizes[0], conf.Consumer.Fetch.Default)
	}
	ready[2].fetchSize = 4 * conf.Consumer.Fetch.Default // grown for a batch cut short
	req, _ := l.request(ready, 400<<10)
	for _, p := range req.Topics[0].Partitions {
		if p.Partition == 2 && p.PartitionMaxBytes != ready[2].fetchSize {
			t.Errorf("partition 2, its fetch size grown: %d, want %d", p.PartitionMaxBytes, ready[2].fetchSize)
		}
	}
}
