package main

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/soakcheck"
)

// livenessWindow is how soon after a fault ended every partition must be
// consumed again (soakcheck.Options.Liveness): the session timeout, by
// which a lost instance's partitions move, + 15 s for the rebalance and
// the first fetch.
const livenessWindow = sessionTimeout + 15*time.Second

// ackedBound is soakcheck.Options.AckedBound with SOAK_PROCESS: how long
// an instance may go on holding a partition after an ack before a commit
// carries it (Config.DurableAcks): its commits come every 200 ms, and one
// that cannot commit loses the partition within the session timeout; 1 s
// more for the commit's round trip and the event logs' clocks.
const ackedBound = sessionTimeout + time.Second

// checkOptions are what the checker judges in this run.
func (so *soak) checkOptions() soakcheck.Options {
	o := soakcheck.Options{MaxViolations: 10, Liveness: livenessWindow}
	if so.s.process {
		o.Process, o.AckedBound = true, ackedBound
	}
	return o
}

// checksSummary says what the liveness check and, with SOAK_PROCESS, the
// process checks found, as Markdown.
func (so *soak) checksSummary(r *soakcheck.Report) string {
	s := fmt.Sprintf("\nLiveness (every partition consumed again within %s of the last fault's end): %d stalls past it.\n", livenessWindow, r.Unlive)
	if so.s.process {
		p := r.Process
		s += fmt.Sprintf("\nSOAK_PROCESS=1 (process.Run: ByKey, Concurrency 64, Retry %d attempts, dead letters to %s, DurableAcks): %d handler calls; "+
			"%d messages handed out and never handled; %d first handlings out of their key's order; %d acked messages handled again within %s of their hold's end, %d beyond it.\n",
			processAttempts, deadLetterTopic, p.Handled, p.NotHandled, p.KeyOrder, p.AckedAgain, ackedBound, p.PastBound)
		s += fmt.Sprintf("\n%s holds %s dead letters; every %dth message is poison: about %d of the %d produced.\n",
			deadLetterTopic, so.deadLetters(), poisonEvery, (r.Produced+poisonEvery-1)/poisonEvery, r.Produced)
	}
	return s
}

// deadLetters counts the messages of the dead-letter topic, as text
// ("unknown" when Kafka does not say).
func (so *soak) deadLetters() string {
	parts, err := so.client.Partitions(deadLetterTopic)
	if err != nil {
		return "unknown"
	}
	n := int64(0)
	for _, p := range parts {
		end, err := so.client.GetOffset(deadLetterTopic, p, sarama.OffsetNewest)
		if err != nil {
			return "unknown"
		}
		n += end
	}
	return fmt.Sprint(n)
}
