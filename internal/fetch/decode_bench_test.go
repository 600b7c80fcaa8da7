//go:build unix

package fetch

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
)

// benchResponse returns a Fetch v12 response of 124 batches of 120
// messages of 100 bytes, uncompressed, without key or headers (14,880
// messages), as a producer's batches of 16 KiB make them.
func benchResponse() (body []byte, messages int) {
	const batches, perBatch = 124, 120
	value := bytes.Repeat([]byte("m"), 100)
	var records []byte
	for i := range batches {
		recs := make([]fetchtest.Record, perBatch)
		for j := range recs {
			recs[j] = fetchtest.Record{OffsetDelta: int32(j), TimestampDelta: int64(j / 10), Value: value}
		}
		records = fetchtest.Batch{BaseOffset: int64(i * perBatch), FirstTimestamp: 1_700_000_000_000, Records: recs}.AppendTo(records)
	}
	body = fetchtest.Response(12, 0, fetchtest.Partition{Topic: "t", Partition: 3, HighWatermark: batches * perBatch,
		LastStableOffset: batches * perBatch, PreferredReadReplica: -1, Records: records})
	return body, batches * perBatch
}

// BenchmarkDecode decodes one response of 14,880 messages as the engine
// does today (sarama's Broker.Fetch: the body read, then decoded into
// sarama.Records; then parse) and with internal/fetch (the body copied,
// as reading it from the connection does, then ReadResponse and Decode).
func BenchmarkDecode(b *testing.B) {
	body, n := benchResponse()
	// The process's CPU time per message besides the wall time (the
	// machine may be loaded), GC included.
	var cpu0 time.Duration
	perMessage := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/msg")
		b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N)/float64(n), "cpu-ns/msg")
	}
	b.Run("sarama+parse", func(b *testing.B) {
		broker := replayBroker(b, 12, body)
		b.ReportAllocs()
		cpu0 = processCPU(b)
		for b.Loop() {
			resp := saramaFetch(b, broker, 12, 0, sarama.ReadUncommitted)
			f := testFetcher(0)
			if msgs, _, _, err := f.saramaParse(resp.GetBlock("t", 3)); err != nil || len(msgs) != n {
				b.Fatalf("%d messages, %v", len(msgs), err)
			}
		}
		perMessage(b)
	})
	b.Run("internal-fetch", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 = processCPU(b)
		for b.Loop() {
			buf := make([]byte, len(body))
			copy(buf, body)
			resp, err := ReadResponse(12, buf)
			if err != nil {
				b.Fatal(err)
			}
			if r, err := Decode(&resp.Partitions[0], 0, false); err != nil || len(r.Messages) != n {
				b.Fatalf("%d messages, %v", len(r.Messages), err)
			}
		}
		perMessage(b)
	})
}

// processCPU returns the CPU time (user and system) of the process so
// far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
