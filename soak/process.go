package main

// SOAK_PROCESS=1: the instances hand their messages to process.Run
// (ByKey, Concurrency 64, Retry, a dead-letter topic) with
// Config.DurableAcks, instead of the plain loop of childMain. The
// producer gives each message one of processKeys keys; a handler fails
// the poison messages on every attempt (they go to the dead-letter
// topic) and the flaky ones on their first attempt on an instance (a
// retry), and takes 12 s over the slow ones. The child writes a Handled event at each handler call, a
// Delivered event for each message Run receives and an Acked event for
// each message Run acks (observedConsumer), and the checker judges the
// keys' order and the handlings after an ack (soakcheck.Options.Process).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/internal/soakcheck"
	"github.com/kafkaconsumer/kafkaconsumer/process"
)

// processEnv, set in a child's environment, makes it run process.Run.
const processEnv = "KAFKACONSUMER_SOAK_PROCESS"

const (
	// deadLetterTopic receives the poison messages (not a soak topic:
	// the subscription's pattern does not match it).
	deadLetterTopic = "soak-dead-letters"
	// processKeys is how many keys the producer spreads the messages on.
	processKeys = 500
	// poisonEvery and flakyEvery pick the poison messages (failing every
	// attempt) and the flaky ones (failing the first) by sequence number.
	poisonEvery = 199
	flakyEvery  = 17
	// slowEvery picks the slow messages, whose handling takes slowWork:
	// longer than ackedBound, so that the acks of their partition's later
	// messages, beyond the committed offset, outlive the bound and a move
	// must not hand them out again (what DurableAcks is for).
	slowEvery = 997
	slowWork  = 12 * time.Second
	// processAttempts is Retry.Attempts.
	processAttempts = 3
)

// processEnv returns the environment that makes a child run process.Run,
// with SOAK_PROCESS.
func (so *soak) processEnv() []string {
	if !so.s.process {
		return nil
	}
	return []string{processEnv + "=1"}
}

// messageKey is the key of the message of sequence number seq: none
// without SOAK_PROCESS.
func (so *soak) messageKey(seq int) sarama.Encoder {
	if !so.s.process {
		return nil
	}
	return sarama.StringEncoder(fmt.Sprintf("k%d", seq%processKeys))
}

// createDeadLetterTopic creates the dead-letter topic with SOAK_PROCESS.
func (so *soak) createDeadLetterTopic() error {
	if !so.s.process {
		return nil
	}
	return so.cluster.CreateTopic(deadLetterTopic, 3, 3)
}

// processMain runs process.Run on the consumer until it is shut down
// (shutDown closed after Shutdown returned): the child's loop with
// SOAK_PROCESS. A stall (stallSignal) holds every handler before it
// begins, until resumeSignal or its partition is revoked.
func processMain(consumer kafkaconsumer.Consumer, log *eventLog, held func(kafkaconsumer.TopicPartition), dialer *brokerDialer,
	seed int64, stall, resume <-chan os.Signal, shutDown <-chan struct{}) int {
	gate := &stallGate{}
	done := make(chan struct{}) // closed when Run returned
	observed := &observedConsumer{Consumer: consumer, log: log, out: make(chan *sarama.ConsumerMessage)}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); gate.follow(log.inst, stall, resume, shutDown, done) }()
	go func() { defer wg.Done(); observed.relay(held, done) }()

	dl := sarama.NewConfig()
	dl.Version = sarama.V2_8_0_0
	dl.Net.Proxy.Enable, dl.Net.Proxy.Dialer = true, dialer // the instance's proxies: its faults cut the dead letters too
	dl.Producer.RequiredAcks = sarama.WaitForAll
	h := &processHandler{log: log, failed: make(map[string]bool), gate: gate}
	err := process.Run(context.Background(), observed, h.handle, process.Options{
		Concurrency: 64,
		Ordering:    process.ByKey,
		Retry:       process.Retry{Attempts: processAttempts, Backoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond},
		DeadLetter:  process.DeadLetter{Topic: deadLetterTopic, Brokers: dialer.brokers, Config: dl},
	})
	close(done)
	wg.Wait()
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak child %s: process.Run (seed %d): %s\n", log.inst, seed, err)
		return 1
	}
	<-shutDown
	return 0
}

// observedConsumer is the consumer as process.Run sees it: its messages
// pass through relay, which writes each one's Delivered event when Run
// receives it, and Ack writes the Acked event.
type observedConsumer struct {
	kafkaconsumer.Consumer
	log *eventLog
	out chan *sarama.ConsumerMessage // unbuffered: a message is Run's once sent
}

// Messages returns the relayed messages; closed when the consumer's are.
func (c *observedConsumer) Messages() <-chan *sarama.ConsumerMessage { return c.out }

// Ack writes the Acked event and acks msg.
func (c *observedConsumer) Ack(msg *sarama.ConsumerMessage) {
	c.log.write(soakcheck.Acked, msg.Topic, msg.Partition, msg.Offset, string(msg.Value))
	c.Consumer.Ack(msg)
}

// relay hands the consumer's messages to Run until they end or done is
// closed, then closes out.
func (c *observedConsumer) relay(held func(kafkaconsumer.TopicPartition), done <-chan struct{}) {
	defer close(c.out)
	for msg := range c.Consumer.Messages() {
		held(kafkaconsumer.TopicPartition{Topic: msg.Topic, Partition: msg.Partition})
		c.log.write(soakcheck.Delivered, msg.Topic, msg.Partition, msg.Offset, string(msg.Value))
		select {
		case c.out <- msg:
		case <-done:
			return
		}
	}
}

var (
	errPoison = errors.New("poison message")
	errFlaky  = errors.New("flaky: fails its first attempt")
)

// processHandler is the soak's handler: it writes the Handled event,
// works a few milliseconds, and fails the poison and flaky messages.
type processHandler struct {
	log    *eventLog
	gate   *stallGate
	mu     sync.Mutex
	failed map[string]bool // flaky messages failed once on this instance
}

func (h *processHandler) handle(ctx context.Context, msg *sarama.ConsumerMessage) error {
	if err := h.gate.wait(ctx); err != nil {
		return err
	}
	h.log.write(soakcheck.Handled, msg.Topic, msg.Partition, msg.Offset, string(msg.Value))
	seq, _ := strconv.Atoi(strings.TrimPrefix(string(msg.Value), "m"))
	// The work: 0-4 ms, or slowWork, cut short by a revocation.
	d := time.Duration(seq%5) * time.Millisecond
	if seq%slowEvery == 0 {
		d = slowWork
	}
	work := time.NewTimer(d)
	defer work.Stop()
	select {
	case <-work.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	if seq%poisonEvery == 0 {
		return errPoison
	}
	if seq%flakyEvery == 0 {
		h.mu.Lock()
		first := !h.failed[string(msg.Value)]
		h.failed[string(msg.Value)] = true
		h.mu.Unlock()
		if first {
			return errFlaky
		}
	}
	return nil
}

// stallGate holds the handlers while the instance is stalled.
type stallGate struct {
	mu      sync.Mutex
	stalled bool
	resumed chan struct{} // closed at the resume
}

// wait returns once the instance is not stalled, or ctx's error.
func (g *stallGate) wait(ctx context.Context) error {
	g.mu.Lock()
	stalled, resumed := g.stalled, g.resumed
	g.mu.Unlock()
	if !stalled {
		return nil
	}
	select {
	case <-resumed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *stallGate) set(stalled bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case stalled && !g.stalled:
		g.resumed = make(chan struct{})
	case !stalled && g.stalled:
		close(g.resumed)
	}
	g.stalled = stalled
}

// follow stalls and resumes the gate on the signals until shutDown or
// done is closed (then it resumes it).
func (g *stallGate) follow(inst string, stall, resume <-chan os.Signal, shutDown, done <-chan struct{}) {
	defer g.set(false)
	for {
		select {
		case <-stall:
			g.set(true)
			fmt.Fprintf(os.Stderr, "soak child %s: stalled at %s\n", inst, time.Now().Format("15:04:05.000"))
		case <-resume:
			g.set(false)
			fmt.Fprintf(os.Stderr, "soak child %s: resumed at %s\n", inst, time.Now().Format("15:04:05.000"))
		case <-shutDown:
			return
		case <-done:
			return
		}
	}
}
