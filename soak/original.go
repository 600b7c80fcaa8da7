package main

// The original-like instance of the migration variant (SOAK_ORIGINAL=1):
// a process that registers in ZooKeeper and claims as the original
// wvanbergen/kafka does (docs/zookeeper-layout.md), without the
// "migration" field, so that it does not follow the group's switch. Its
// share is computed as the original computes it: the registered
// instances' IDs sorted, and a contiguous run of the sorted partitions
// each; started while the switch says kafka, it is the only one
// registered, and its share is every partition. It claims each partition
// of its share whose owner node is free (ephemeral, holding its ID),
// tries again every claimRetry for the others, consumes what it claimed
// from the committed offset, acks each message at once, and commits
// nothing. On SIGTERM it stops and closes its session, which deletes its
// nodes. The events go to its log as the other instances' do.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/kafkaconsumer/kafkaconsumer/internal/soakcheck"
)

// claimRetry is how often the original-like instance tries to claim the
// partitions of its share that it does not hold.
const claimRetry = 500 * time.Millisecond

// originalMain runs the original-like instance; it returns the exit
// status.
func originalMain(inst, zookeeper, path, routes string) int {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak original:", err)
		return 2
	}
	defer f.Close()
	log := &eventLog{f: f, inst: inst}
	config := sarama.NewConfig()
	config.Version = sarama.V2_8_0_0
	dialer, err := newBrokerDialer(routes, config.Net.DialTimeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak original:", err)
		return 2
	}
	config.Net.Proxy.Enable = true
	config.Net.Proxy.Dialer = dialer
	client, err := sarama.NewClient(dialer.brokers, config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak original:", err)
		return 1
	}
	defer client.Close()
	conn, _, err := zk.Connect(strings.Split(zookeeper, ","), sessionTimeout, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak original:", err)
		return 1
	}
	defer conn.Close()
	id := fmt.Sprintf("soak-%s-%d", inst, os.Getpid())
	group := "/consumers/" + groupName
	registration, _ := json.Marshal(map[string]any{"pattern": "white_list", "subscription": map[string]int{topicPattern: 1},
		"timestamp": fmt.Sprint(time.Now().UnixMilli()), "version": 1})
	if _, err := conn.Create(group+"/ids/"+id, registration, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		fmt.Fprintln(os.Stderr, "soak original: register:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "soak original %s: registered as %s at %s\n", inst, id, time.Now().Format("15:04:05.000"))

	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak original:", err)
		return 1
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak original:", err)
		return 1
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	var (
		wg      sync.WaitGroup
		stop    = make(chan struct{})
		claimed = make(map[string]sarama.PartitionConsumer) // "topic/partition"
	)
	tick := time.NewTicker(claimRetry)
	defer tick.Stop()
	for done := false; !done; {
		for _, tp := range originalShare(client, conn, group, id) {
			key := fmt.Sprintf("%s/%d", tp.topic, tp.partition)
			if claimed[key] != nil {
				continue
			}
			owners := group + "/owners/" + tp.topic
			_, _ = conn.Create(owners, nil, 0, zk.WorldACL(zk.PermAll))
			if _, err := conn.Create(fmt.Sprintf("%s/%d", owners, tp.partition), []byte(id), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
				continue // owned by another, or no answer: the next round
			}
			offset := sarama.OffsetNewest
			if resp, err := admin.ListConsumerGroupOffsets(groupName, map[string][]int32{tp.topic: {tp.partition}}); err == nil {
				if b := resp.GetBlock(tp.topic, tp.partition); b != nil && b.Offset >= 0 {
					offset = b.Offset
				}
			}
			pc, err := consumer.ConsumePartition(tp.topic, tp.partition, offset)
			if err != nil {
				_ = conn.Delete(fmt.Sprintf("%s/%d", owners, tp.partition), -1)
				continue
			}
			fmt.Fprintf(os.Stderr, "soak original %s: claimed %s from offset %d at %s\n", inst, key, offset, time.Now().Format("15:04:05.000"))
			claimed[key] = pc
			log.write(soakcheck.Assigned, tp.topic, tp.partition, 0, "")
			wg.Add(1)
			go func() { // owned by originalMain, which waits for wg
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case msg, ok := <-pc.Messages():
						if !ok {
							return
						}
						log.write(soakcheck.Delivered, msg.Topic, msg.Partition, msg.Offset, string(msg.Value))
						log.write(soakcheck.Acked, msg.Topic, msg.Partition, msg.Offset, string(msg.Value))
					}
				}
			}()
		}
		select {
		case <-signals:
			done = true
		case <-tick.C:
		}
	}
	close(stop)
	wg.Wait()
	for key, pc := range claimed {
		_ = pc.Close()
		topic, part, _ := strings.Cut(key, "/")
		var p int32
		_, _ = fmt.Sscan(part, &p)
		log.write(soakcheck.Revoked, topic, p, 0, "")
	}
	return 0
}

type originalPartition struct {
	topic     string
	partition int32
}

// originalShare returns the original's share of id among the registered
// instances: the partitions of the soak topics sorted, and the instances'
// IDs; instance i of C gets a contiguous run of P/C, the first P%C one
// more. (The original sorts by leader first; the run is what matters
// here, not which.)
func originalShare(client sarama.Client, conn *zk.Conn, group, id string) []originalPartition {
	ids, _, err := conn.Children(group + "/ids")
	if err != nil {
		return nil
	}
	sort.Strings(ids)
	me := sort.SearchStrings(ids, id)
	if me == len(ids) || ids[me] != id {
		return nil
	}
	_ = client.RefreshMetadata()
	topics, err := client.Topics()
	if err != nil {
		return nil
	}
	pattern := regexp.MustCompile(topicPattern)
	var all []originalPartition
	for _, t := range topics {
		if !pattern.MatchString(t) {
			continue
		}
		ps, err := client.Partitions(t)
		if err != nil {
			continue
		}
		for _, p := range ps {
			all = append(all, originalPartition{t, p})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		return all[i].topic < all[j].topic || all[i].topic == all[j].topic && all[i].partition < all[j].partition
	})
	n, c := len(all), len(ids)
	from := me*(n/c) + min(me, n%c)
	size := n / c
	if me < n%c {
		size++
	}
	return all[from : from+size]
}
