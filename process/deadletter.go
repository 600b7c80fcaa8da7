package process

// Dead letters: the produce of a message whose last attempt failed, with
// the caller's producer or one made from DeadLetter.Brokers.

import (
	"strconv"
	"sync"

	"github.com/IBM/sarama"
)

// deadLetterer produces dead letters to one topic.
type deadLetterer struct {
	topic string
	// brokers and config make the producer when the caller gave none.
	brokers []string
	config  *sarama.Config

	mu sync.Mutex // guards producer and own
	// producer is the caller's, or the one made from brokers (own), or
	// nil until that is made.
	producer sarama.SyncProducer
	own      bool
}

func newDeadLetterer(d DeadLetter) *deadLetterer {
	dl := &deadLetterer{topic: d.Topic, producer: d.Producer, brokers: d.Brokers}
	if d.Producer == nil {
		var config sarama.Config
		if d.Config != nil {
			config = *d.Config
		} else {
			config = *sarama.NewConfig()
			config.Producer.RequiredAcks = sarama.WaitForAll
		}
		config.Producer.Return.Successes = true
		config.Producer.Return.Errors = true
		dl.config = &config
	}
	return dl
}

// get returns the producer, making it first when it is Run's own and not
// made yet.
func (dl *deadLetterer) get() (sarama.SyncProducer, error) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.producer != nil {
		return dl.producer, nil
	}
	p, err := sarama.NewSyncProducer(dl.brokers, dl.config)
	if err != nil {
		return nil, err
	}
	dl.producer, dl.own = p, true
	return p, nil
}

// produce produces the dead letter of msg, whose handler failed attempts
// times, the last time with cause. It blocks until the producer
// confirmed it or failed.
func (dl *deadLetterer) produce(msg *sarama.ConsumerMessage, cause error, attempts int) error {
	p, err := dl.get()
	if err != nil {
		return err
	}
	_, _, err = p.SendMessage(deadLetterOf(dl.topic, msg, cause, attempts))
	return err
}

// deadLetterOf returns the dead letter of msg for topic (see DeadLetter).
func deadLetterOf(topic string, msg *sarama.ConsumerMessage, cause error, attempts int) *sarama.ProducerMessage {
	headers := make([]sarama.RecordHeader, 0, len(msg.Headers)+5)
	for _, h := range msg.Headers {
		if h != nil {
			headers = append(headers, *h)
		}
	}
	errText := "<nil>"
	if cause != nil {
		errText = cause.Error()
	}
	headers = append(headers,
		sarama.RecordHeader{Key: []byte(HeaderTopic), Value: []byte(msg.Topic)},
		sarama.RecordHeader{Key: []byte(HeaderPartition), Value: strconv.AppendInt(nil, int64(msg.Partition), 10)},
		sarama.RecordHeader{Key: []byte(HeaderOffset), Value: strconv.AppendInt(nil, msg.Offset, 10)},
		sarama.RecordHeader{Key: []byte(HeaderError), Value: []byte(errText)},
		sarama.RecordHeader{Key: []byte(HeaderAttempts), Value: strconv.AppendInt(nil, int64(attempts), 10)},
	)
	pm := &sarama.ProducerMessage{Topic: topic, Headers: headers}
	if msg.Key != nil {
		pm.Key = sarama.ByteEncoder(msg.Key)
	}
	if msg.Value != nil {
		pm.Value = sarama.ByteEncoder(msg.Value)
	}
	return pm
}

// close closes the producer if Run made it. The produces have all
// returned.
func (dl *deadLetterer) close() {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.own && dl.producer != nil {
		_ = dl.producer.Close()
		dl.producer = nil
	}
}
