// Command producer writes a steady stream of sample messages to a topic,
// for the groupdemo consumers: values "<prefix>-0", "<prefix>-1", ... (all
// distinct), spread round robin over the partitions, at -rate messages per
// second, until -count messages are sent or SIGINT/SIGTERM.
//
//	producer -brokers 127.0.0.1:9092 -topic demo -rate 200
//
// Every -stats interval it prints a progress line; at the end, once every
// message is acknowledged or failed, one parseable summary line:
//
//	SUMMARY role=producer topic=demo produced=6000 failed=0 elapsed=30.0s
//
// produced counts the messages Kafka acknowledged. With -record FILE, it
// appends their values to FILE, one a line.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "producer: %s\n", err)
		if errors.As(err, new(usageError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is an error in the command line.
type usageError struct{ error }

// run is the command: it produces until ctx is done or -count messages
// are sent, waits for their acknowledgements and prints the summary.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("producer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", os.Getenv("KAFKA_PEERS"), "Kafka brokers, comma-separated (default $KAFKA_PEERS)")
	topic := fs.String("topic", "", "topic to write to (required)")
	rate := fs.Float64("rate", 200, "messages per second")
	count := fs.Int64("count", 0, "stop after this many messages (0: until SIGINT/SIGTERM)")
	prefix := fs.String("prefix", fmt.Sprintf("m%d", time.Now().Unix()), "prefix of the message values")
	stats := fs.Duration("stats", 2*time.Second, "interval of the progress lines")
	recordPath := fs.String("record", "", "append the value of each acknowledged message to this file, one a line")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	switch {
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	case *brokers == "":
		return usageError{errors.New("-brokers is required (or set KAFKA_PEERS)")}
	case *topic == "":
		return usageError{errors.New("-topic is required")}
	case *rate <= 0:
		return usageError{fmt.Errorf("-rate must be positive, got %g", *rate)}
	case *stats <= 0:
		return usageError{fmt.Errorf("-stats must be positive, got %s", *stats)}
	}

	var record *bufio.Writer
	if *recordPath != "" {
		f, err := os.OpenFile(*recordPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		record = bufio.NewWriter(f)
	}

	config := sarama.NewConfig()
	config.ClientID = "kafkaconsumer-demo-producer"
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	producer, err := sarama.NewAsyncProducer(strings.Split(*brokers, ","), config)
	if err != nil {
		return fmt.Errorf("connect to kafka at %s: %w", *brokers, err)
	}

	// The collector goroutine counts acknowledgements and failures until
	// the producer closes both channels (after AsyncClose); run waits for
	// it.
	var (
		mu             sync.Mutex // guards acked, failed, lastErr
		acked, failed  int64
		lastErr        error
		collectorDone  = make(chan struct{})
		successes, bad = producer.Successes(), producer.Errors()
	)
	go func() {
		defer close(collectorDone)
		for successes != nil || bad != nil {
			select {
			case msg, ok := <-successes:
				if !ok {
					successes = nil
					continue
				}
				if record != nil {
					_, _ = record.WriteString(string(msg.Value.(sarama.StringEncoder)) + "\n")
				}
				mu.Lock()
				acked++
				mu.Unlock()
			case perr, ok := <-bad:
				if !ok {
					bad = nil
					continue
				}
				mu.Lock()
				failed++
				lastErr = perr.Err
				mu.Unlock()
			}
		}
	}()
	counts := func() (int64, int64, error) {
		mu.Lock()
		defer mu.Unlock()
		return acked, failed, lastErr
	}

	fmt.Fprintf(stdout, "[producer] writing %s-0, %s-1, ... to %s at %g/s\n", *prefix, *prefix, *topic, *rate)
	start := time.Now()
	pace := time.NewTicker(10 * time.Millisecond)
	defer pace.Stop()
	report := time.NewTicker(*stats)
	defer report.Stop()
	var sent, lastSent int64
	lastReport := start
	done := ctx.Done()
produce:
	for *count == 0 || sent < *count {
		select {
		case <-done:
			break produce
		case now := <-report.C:
			a, f, e := counts()
			line := fmt.Sprintf("[producer] sent=%d acked=%d failed=%d rate=%.0f/s", sent, a, f, float64(sent-lastSent)/now.Sub(lastReport).Seconds())
			if e != nil {
				line += " last error: " + e.Error()
			}
			fmt.Fprintln(stdout, line)
			lastSent, lastReport = sent, now
		case now := <-pace.C:
			due := int64(now.Sub(start).Seconds() * *rate)
			for ; sent < due && (*count == 0 || sent < *count); sent++ {
				msg := &sarama.ProducerMessage{Topic: *topic, Value: sarama.StringEncoder(fmt.Sprintf("%s-%d", *prefix, sent))}
				select {
				case producer.Input() <- msg:
				case <-done:
					break produce
				}
			}
		}
	}

	fmt.Fprintf(stdout, "[producer] stopping after %d messages; waiting for their acknowledgements\n", sent)
	producer.AsyncClose() // flushes, then closes Successes and Errors
	<-collectorDone
	if record != nil {
		if err := record.Flush(); err != nil {
			return fmt.Errorf("write %s: %w", *recordPath, err)
		}
	}
	a, f, e := counts()
	fmt.Fprintf(stdout, "SUMMARY role=producer topic=%s produced=%d failed=%d elapsed=%.1fs\n", *topic, a, f, time.Since(start).Seconds())
	if f > 0 {
		return fmt.Errorf("%d messages failed; last error: %w", f, e)
	}
	return nil
}
