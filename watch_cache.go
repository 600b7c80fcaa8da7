package kafkaconsumer

// The watch cache: the ZooKeeper watches of a consumer's subscription that
// have not fired yet, reused from one round of watching to the next, and
// the merger goroutine that waits for the first event of a round's
// watches.

import (
	"log/slog"
	"reflect"
	"sync"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// watchCache holds the watches that a consumer's subscription set and that
// have not fired yet, each with what was read when it was set.
//
// ZooKeeper's watches are one-shot, and the ZooKeeper client keeps each of
// them (a buffered channel in its watcher list) until its node changes or
// the connection closes. The consumer watches its subscription again each
// time one watch fires, e.g. the topic list at every topic created in the
// cluster; setting a new watch on every subscribed topic then would leave
// one more watcher per topic each time. Through the cache, a topic whose
// watch has not fired keeps its watch and the partitions read with it (they
// cannot have changed, or the watch would have fired), so the client holds
// one watcher per watched node.
//
// A round of watching is begin, then watchTopics and watchTopic for what the
// subscription needs, read through a topicWatcher (topics.go: the
// instance's session, or a *kazoo.Kazoo given to WatchPartitions), then
// end, which merges the round's watches into one channel with a goroutine
// (merger). No channel of a watch is ever read by
// two parties: begin stops the last round's merger, and notes the watch
// whose event it took, before the cache looks at any watch itself.
//
// A watchCache belongs to one consumer and is used by its manager goroutine
// only: it is not safe for concurrent use. Its zero value is empty and ready
// to use.
type watchCache struct {
	// log is the consumer's logger; nil for a subscription's
	// WatchPartitions called directly (then the package Logger).
	log *slog.Logger

	topics map[string]*pendingWatch // topic name -> the watch on its node
	// missingTopic, when set (a test hook), is called when a topic of a
	// static subscription is found missing, before the topic list's watch.
	missingTopic func(topic string)
	list         *pendingWatch // the watch on the topic list, or nil

	round uint64          // counts the rounds; a topic watch not used in the last one is dropped
	used  []*pendingWatch // the watches of the round, in the order of merge's cases
	// merge is the goroutine that waits for the first event of the last
	// ended round's watches, or nil. Started by end, stopped by the next
	// begin; it also ends at the first event, and when the ZooKeeper
	// connection closes (which closes every watch's channel).
	merge *merger
}

// pendingWatch is a watch that the cache holds, and what was read when it
// was set.
type pendingWatch struct {
	changed    watchChan
	fired      bool                // its event was taken (by a merger or by hasFired)
	partitions kazoo.PartitionList // of a topic's watch
	// err is the error of a topic's node that was read but is not a
	// topic's: reported at every round until the node changes.
	err    error
	topics kazoo.TopicList // of the topic list's watch
	round  uint64          // the last round that used it
}

// hasFired tells whether the watch fired; it takes the event to find out,
// which is safe only when no merger may be reading the channel.
func (w *pendingWatch) hasFired() bool {
	if !w.fired && w.changed.fired() { // the event, or the close that follows it
		w.fired = true
	}
	return w.fired
}

// logf logs through the consumer's logger, or the package Logger.
func (c *watchCache) logf(level slog.Level, format string, args ...interface{}) {
	if c.log == nil {
		Logger.Printf(format, args...)
		return
	}
	logf(c.log, level, format, args...)
}

// stop stops the merger of the last round, if any, and waits for it: for
// the consumer's shutdown, so that no goroutine of the cache outlives it.
func (c *watchCache) stop() {
	if c.merge != nil {
		c.merge.stop()
		c.merge = nil
	}
}

// begin starts a round: it stops the merger of the last round, and marks the
// watch whose event that merger took as fired.
func (c *watchCache) begin() {
	if c.merge != nil {
		if i := c.merge.stop(); i >= 0 {
			c.used[i].fired = true
		}
		c.merge = nil
	}
	c.used = c.used[:0]
	c.round++
}

// watchTopics returns the topic list and adds its watch to the round: the
// pending one when it has not fired, else a new one.
func (c *watchCache) watchTopics(r topicWatcher) (kazoo.TopicList, error) {
	if c.list == nil || c.list.hasFired() {
		c.list = nil
		topics, changed, err := r.watchTopics()
		if err != nil {
			return nil, err
		}
		c.list = &pendingWatch{changed: changed, topics: topics}
	}
	c.list.round = c.round
	c.used = append(c.used, c.list)
	return c.list.topics, nil
}

// prefetchLimit is the most topic reads prefetch has in flight at once.
const prefetchLimit = 64

// prefetch reads the nodes of the named topics whose watch is missing or
// fired, several at once (go-zookeeper sends the requests of concurrent
// callers without waiting for the answers between them), and keeps each
// read with its watch for watchTopic, which then makes no request for it,
// so a round's topic reads cost about one round trip, not one each. A
// read that set no watch (it failed) is left to watchTopic, which reads
// again and reports. Called within a round, like watchTopic.
func (c *watchCache) prefetch(r topicWatcher, names []string) {
	var stale []string
	for _, name := range names {
		if w := c.topics[name]; w == nil || w.hasFired() {
			stale = append(stale, name)
		}
	}
	if len(stale) < 2 {
		return
	}
	reads := make([]pendingWatch, len(stale))
	slots := make(chan struct{}, prefetchLimit)
	var wg sync.WaitGroup
	for i, name := range stale {
		slots <- struct{}{}
		wg.Add(1)
		go func() { // owned by prefetch, which waits for it
			defer wg.Done()
			defer func() { <-slots }()
			reads[i].partitions, reads[i].changed, reads[i].err = r.watchTopic(name)
		}()
	}
	wg.Wait()
	for i, name := range stale {
		if reads[i].changed.set() {
			if c.topics == nil {
				c.topics = make(map[string]*pendingWatch)
			}
			w := reads[i]
			c.topics[name] = &w
		}
	}
}

// watchTopic returns the partitions of the topic and adds the watch on its
// node to the round: the pending one when it has not fired, else a new one.
// A node that is not a topic's keeps its watch too, and its error is
// returned until the node changes.
func (c *watchCache) watchTopic(r topicWatcher, name string) (kazoo.PartitionList, error) {
	w := c.topics[name]
	if w == nil || w.hasFired() {
		delete(c.topics, name)
		partitions, changed, err := r.watchTopic(name)
		if !changed.set() {
			return nil, err
		}
		w = &pendingWatch{changed: changed, partitions: partitions, err: err}
		if c.topics == nil {
			c.topics = make(map[string]*pendingWatch)
		}
		c.topics[name] = w
	}
	w.round = c.round
	c.used = append(c.used, w)
	return w.partitions, w.err
}

// end ends the round: it drops the topic watches that the round did not use
// (their topics were deleted or left the subscription; the client still
// holds them until they fire), and returns a channel that receives the
// first event of the round's watches (see startMerger). The topic list's
// watch is kept even when unused, for a later round that needs it.
func (c *watchCache) end() <-chan zk.Event {
	for name, w := range c.topics {
		if w.round != c.round {
			delete(c.topics, name)
		}
	}
	watches := make([]watchChan, len(c.used))
	for i, w := range c.used {
		watches[i] = w.changed
	}
	var out <-chan zk.Event
	c.merge, out = startMerger(watches)
	return out
}

// merger is a goroutine that waits for the first event of a set of watches
// and passes it on, converted, to its output channel (buffered, so that it
// never blocks); it then closes the channel and ends. stop ends it early,
// closing the channel without an event.
type merger struct {
	quit chan struct{} // closed by stop
	done chan struct{} // closed by the goroutine when it ends
	// took is the index of the watch whose event (or close) the goroutine
	// took, or -1; written by the goroutine before it closes done.
	took int
}

// startMerger starts a merger of the watches and returns it with its output
// channel. Without watches, it starts nothing, and the channel never fires.
//
// The merger turns one-shot ZooKeeper watches into one channel of
// go-zookeeper's events, converting those of the archived client
// (eventOf). The watches that have not fired when it ends are left to the
// ZooKeeper client, which sends their one event into a buffered channel
// and closes it when they fire or when the connection is closed. Its
// owner stops it (stop), also after it ended by itself.
func startMerger(watches []watchChan) (*merger, <-chan zk.Event) {
	m := &merger{quit: make(chan struct{}), done: make(chan struct{}), took: -1}
	out := make(chan zk.Event, 1)
	if len(watches) == 0 {
		close(m.done)
		return m, out
	}
	cases := make([]reflect.SelectCase, len(watches)+1)
	for i, w := range watches {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: w.ch}
	}
	cases[len(watches)] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(m.quit)}
	go func() {
		defer close(m.done)
		defer close(out)
		i, v, ok := reflect.Select(cases)
		if i == len(watches) {
			return // stopped: the output is abandoned
		}
		m.took = i
		out <- eventOf(v, ok)
	}()
	return m, out
}

// stop ends the merger, if it is still waiting, and waits until it is gone.
// It returns the index of the watch whose event the merger took, or -1. It
// is called once, by the merger's owner.
func (m *merger) stop() int {
	close(m.quit)
	<-m.done
	return m.took
}
