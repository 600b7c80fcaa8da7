// Package fetch decodes Fetch responses straight into the messages that
// the consumer hands out: the response framed by franz-go's kmsg (whose
// partitions keep their records as the raw bytes of the response), and
// each partition's record batches (magic 2) or legacy message sets
// (magic 0 and 1) decoded once into slabs of sarama.ConsumerMessage whose
// keys, values and headers alias the response or the decompressed batch.
package fetch

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Response is a decoded Fetch response: its throttle time, its error
// and every partition's part, records undecoded (see Decode).
type Response struct {
	// ThrottleTime is how long the broker asks the client to wait before
	// its next request (quotas; Fetch v1+), 0 when none.
	ThrottleTime time.Duration
	// Err is the response's own error (Fetch v7+: a fetch session's),
	// sarama.ErrNoError when none.
	Err sarama.KError
	// SessionID is the fetch session of the response (Fetch v7+), 0 when
	// none.
	SessionID int32
	// Partitions holds every partition of the response, in its order.
	Partitions []Partition
}

// Partition is one partition's part of a Fetch response.
type Partition struct {
	Topic     string
	Partition int32
	// Err is the partition's error, sarama.ErrNoError when none.
	Err sarama.KError
	// HighWatermark, LastStableOffset (Fetch v4+) and LogStartOffset
	// (Fetch v5+) are the partition's as the broker sent them; -1 when
	// the version has none.
	HighWatermark    int64
	LastStableOffset int64
	LogStartOffset   int64
	// PreferredReadReplica is the broker the leader asks the client to
	// fetch from (Fetch v11+, KIP-392), -1 when none.
	PreferredReadReplica int32
	// Aborted holds the transactions aborted in the fetched range (Fetch
	// v4+, read_committed only).
	Aborted []Aborted
	// Records are the partition's record batches or message sets as the
	// broker sent them, aliasing the response body; the last may be cut
	// short (the broker fills a response up to its MaxBytes). len(Records)
	// is the partition's size on the wire.
	Records []byte
}

// Aborted is an aborted transaction: its producer, and the offset of its
// first record.
type Aborted struct {
	ProducerID  int64
	FirstOffset int64
}

// ReadResponse decodes the body of a Fetch response of the given version
// (the bytes after the response header). The partitions' Records alias
// body: body must not change while they or the messages decoded from them
// are in use.
func ReadResponse(version int16, body []byte) (*Response, error) {
	kr := kmsg.FetchResponse{Version: version}
	if err := kr.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("fetch: reading a Fetch v%d response of %d bytes: %w", version, len(body), err)
	}
	return FromKmsg(&kr), nil
}

// FromKmsg returns the Response of kr, a Fetch response that kmsg read
// (franz-go's client reads a response so): the partitions' Records alias
// kr's RecordBatches, and through them the response body, which must not
// change while they or the messages decoded from them are in use.
func FromKmsg(kr *kmsg.FetchResponse) *Response {
	n := 0
	for i := range kr.Topics {
		n += len(kr.Topics[i].Partitions)
	}
	resp := &Response{
		ThrottleTime: time.Duration(kr.ThrottleMillis) * time.Millisecond,
		Err:          sarama.KError(kr.ErrorCode),
		SessionID:    kr.SessionID,
		Partitions:   make([]Partition, 0, n),
	}
	for i := range kr.Topics {
		t := &kr.Topics[i]
		for j := range t.Partitions {
			kp := &t.Partitions[j]
			p := Partition{
				Topic:                t.Topic,
				Partition:            kp.Partition,
				Err:                  sarama.KError(kp.ErrorCode),
				HighWatermark:        kp.HighWatermark,
				LastStableOffset:     kp.LastStableOffset,
				LogStartOffset:       kp.LogStartOffset,
				PreferredReadReplica: kp.PreferredReadReplica,
				Records:              kp.RecordBatches,
			}
			if len(kp.AbortedTransactions) > 0 {
				p.Aborted = make([]Aborted, len(kp.AbortedTransactions))
				for k, a := range kp.AbortedTransactions {
					p.Aborted[k] = Aborted{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset}
				}
			}
			resp.Partitions = append(resp.Partitions, p)
		}
	}
	return resp
}
