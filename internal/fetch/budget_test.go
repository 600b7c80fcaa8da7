package fetch

import "testing"

// responseBytes returns what a response of n messages of value bytes
// each, in record batches of 16, counts in the budget and takes on the
// wire (record format v2, uncompressed: about 10 bytes a record and 61 a
// batch beside the values).
func responseBytes(n, value int64) (counted, wire int64) {
	const recordWire, batchWire = 10, 61
	counted = n * (value + MessageOverhead)
	wire = n*(value+recordWire) + (n+15)/16*batchWire
	return counted, wire
}

// TestFetchBudgetRatioOfRecentResponses: a loop whose last response held
// messages of 1 KiB values, after one of 10-byte values, asks for so
// little that a response of 10-byte values filling its request stays
// within its reservation: the ratio of counted to wire bytes is the
// largest of the recent responses', not the last one's.
func TestFetchBudgetRatioOfRecentResponses(t *testing.T) {
	t.Parallel()
	b := &Budget{limit: 1 << 20}
	l := &brokerLoop{}
	l.measure(responseBytes(1000, 10))
	l.measure(responseBytes(100, 1024))
	maxBytes, ok := b.reserve(l, 1<<20)
	if !ok {
		t.Fatal("nothing reserved of an empty budget")
	}
	reserved := b.buffered.Load()
	counted, wire := responseBytes(1000, 10)
	filled := int64(maxBytes) * counted / wire // a response of 10-byte values of maxBytes on the wire
	if filled > reserved*11/10 {
		t.Errorf("a response of 10-byte values filling the request of %d bytes counts %d bytes: %.1f times the %d reserved",
			maxBytes, filled, float64(filled)/float64(reserved), reserved)
	}
}

// TestFetchBudgetSlowBrokerKeepsItsShare: six loops (three brokers, two
// connections each) share the budget. The two loops of a broker whose
// partitions are slow to take their slabs fetch first, as much as they
// may, and nothing of it is taken; each of the other four loops may
// still send a request of at least a quarter of its share, rather than
// the 1 byte of a spent budget.
func TestFetchBudgetSlowBrokerKeepsItsShare(t *testing.T) {
	t.Parallel()
	const limit, fetchMax = 6000, 1 << 20
	b := &Budget{limit: limit}
	loops := make([]*brokerLoop, 6)
	for i := range loops {
		b.join()
		loops[i] = &brokerLoop{}
	}
	slow, others := loops[:2], loops[2:]
	for _, l := range slow {
		for range 10 {
			if _, ok := b.reserve(l, fetchMax); !ok {
				break
			}
			b.count(l, l.reserved) // a response that fills its reservation
			b.settle(l)
		}
	}
	least := int64(limit / len(loops) / 4)
	for i, l := range others {
		_, ok := b.reserve(l, fetchMax)
		if reserved := l.reserved; !ok || reserved < least {
			t.Errorf("loop %d of another broker reserved %d bytes (%v) beside the slow broker's loops holding %d and %d; want at least %d",
				i, reserved, ok, slow[0].held.Load(), slow[1].held.Load(), least)
		}
		b.settle(l)
	}
}
