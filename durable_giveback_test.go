package kafkaconsumer

// Processing.GiveBack with Config.DurableAcks, against the real cluster:
// a message given back is never in the acked set, the commit stops at it,
// and the acks after it are kept.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/commitmark"
)

// TestDurableAcksGiveBack: with DurableAcks, a consumer gives back one
// message (Processing.GiveBack) and acks every other, some of them only
// after the give-back; its last commit is at the given-back offset and
// carries the acks after it, and the next consumer of the group hands out
// the given-back message alone. Once on plain records, with an earlier
// message acked after the give-back (the give-back is not the oldest
// pending one when it comes); once on a transactional topic, where the
// given-back message is the first after a commit marker (the offset
// before it holds no message), and the commit had reached it already.
func TestDurableAcksGiveBack(t *testing.T) {
	parallelClusterTest(t)
	for _, tc := range []struct {
		name string
		// fill writes the topic's one partition and returns the offsets
		// of its messages and the partition's end once every write
		// (transaction markers too) is in.
		fill func(t *testing.T, client sarama.Client, topic string) (offsets []int64, end int64)
		// giveBack is the offset given back; ackedLate are acked after
		// the give-back, the others as they come.
		giveBack  int64
		ackedLate []int64
		// committedFirst is the commit to wait for before the give-back
		// (-1: none).
		committedFirst int64
	}{
		{
			name: "plain",
			fill: func(t *testing.T, client sarama.Client, topic string) ([]int64, int64) {
				produce(t, client, topic, "v", 100)
				offsets := make([]int64, 100)
				for i := range offsets {
					offsets[i] = int64(i)
				}
				return offsets, 100
			},
			giveBack:       40,
			ackedLate:      []int64{20, 60, 61, 99},
			committedFirst: 20,
		},
		{
			name: "after a transaction marker",
			fill: func(t *testing.T, client sarama.Client, topic string) ([]int64, int64) {
				producer := newTransactionalProducer(t)
				defer func() { _ = producer.Close() }()
				var offsets []int64
				for txn := range 2 { // each: 10 records, then its COMMIT marker
					if err := producer.BeginTxn(); err != nil {
						t.Fatal(err)
					}
					for i := range 10 {
						_, offset, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder("v")})
						if err != nil {
							t.Fatal(err)
						}
						if want := int64(txn*11 + i); offset != want {
							t.Fatalf("record %d of transaction %d at offset %d, want %d", i, txn, offset, want)
						}
						offsets = append(offsets, offset)
					}
					if err := producer.CommitTxn(); err != nil {
						t.Fatal(err)
					}
				}
				return offsets, 22 // 0-9 and 11-20: 10 and 21 are markers
			},
			giveBack:       11,
			ackedLate:      []int64{12, 13, 14, 15, 16, 17, 18, 19, 20},
			committedFirst: 11,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := newTestClient(t)
			topic, group := uniqueName("durable-giveback"), uniqueName("durable-giveback")
			createTopic(t, newTestAdmin(t, client), topic, 1)
			offsets, end := tc.fill(t, client, topic)
			// The transaction coordinator writes a COMMIT marker after
			// CommitTxn returned: the partition's end is read once it is
			// there, or a commit past the marker would never equal it.
			waitFor(t, 30*time.Second, fmt.Sprintf("the partition's end to reach %d", end), func() bool {
				return newestOffsets(t, client, topic)[0] == end
			})

			config := testConfig()
			config.DurableAcks = true
			config.MaxProcessingTime = 5 * time.Second
			start := func() Consumer {
				c := join(t, group, TopicSubscription(topic), config)
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			late := func(msg *sarama.ConsumerMessage) bool {
				return msg.Offset == tc.giveBack || slices.Contains(tc.ackedLate, msg.Offset)
			}

			c1 := start()
			first := readDurable(c1, false, late)
			waitFor(t, 60*time.Second, "every message to be received", func() bool {
				n, _ := first.count()
				return n == len(offsets)
			})
			if tc.committedFirst >= 0 {
				waitFor(t, 30*time.Second, "the commit before the give-back", func() bool {
					return committedOffsets(t, client, group, topic)[0] == tc.committedFirst
				})
			}
			first.mu.Lock()
			held := slices.Clone(first.held)
			first.mu.Unlock()
			for _, msg := range held {
				if msg.Offset == tc.giveBack {
					c1.Processing().GiveBack(msg)
				}
			}
			for _, msg := range held {
				if msg.Offset != tc.giveBack {
					c1.Ack(msg)
				}
			}
			if err := c1.Close(); err != nil {
				t.Fatalf("close: %s", err)
			}
			<-first.done

			// The last commit: at the given-back offset, with every acked
			// message after it in the acked set, and not the given-back one.
			committed, metadata := committedMetadata(t, client, group, topic)
			if committed[0] != tc.giveBack {
				t.Errorf("committed %d after the give-back of %d and Close, want %d", committed[0], tc.giveBack, tc.giveBack)
			}
			acked, err := commitmark.Acked(metadata[0], committed[0])
			if err != nil {
				t.Errorf("the acked set of the last commit: %s", err)
			}
			var missing []int64
			for _, o := range offsets {
				if o > tc.giveBack && !inRanges(acked, o) {
					missing = append(missing, o)
				}
			}
			if len(missing) > 0 {
				t.Errorf("acked offsets %v are not in the acked set %v of the commit at %d", missing, acked, committed[0])
			}
			if inRanges(acked, tc.giveBack) {
				t.Errorf("the given-back offset %d is in the acked set %v", tc.giveBack, acked)
			}

			c2 := start()
			second := readDurable(c2, false, func(*sarama.ConsumerMessage) bool { return false })
			waitFor(t, 60*time.Second, "the given-back message to be received again and the commit to reach the end", func() bool {
				n, _ := second.count()
				return n >= 1 && committedOffsets(t, client, group, topic)[0] == end
			})
			if err := c2.Close(); err != nil {
				t.Fatalf("close: %s", err)
			}
			<-second.done
			var again []int64
			for m := range second.received {
				again = append(again, m.offset)
			}
			slices.Sort(again)
			if !slices.Equal(again, []int64{tc.giveBack}) {
				t.Errorf("after the restart, handed out %v; want [%d] (the given-back one)", again, tc.giveBack)
			}
			t.Logf("commit at %d with acked set %v; after the restart, handed out %v", committed[0], acked, again)
		})
	}
}
