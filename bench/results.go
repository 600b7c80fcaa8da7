package main

import (
	"fmt"
	"slices"
	"strings"
)

// results is everything a bench run measured; it is written as JSON.
type results struct {
	Meta            meta            `json:"meta"`
	Throughput      *drainTable     `json:"throughput,omitempty"`
	GroupThroughput *drainTable     `json:"group_throughput,omitempty"`
	Rebalance       *rebalanceTable `json:"rebalance,omitempty"`
	Startup         *drainTable     `json:"startup,omitempty"`
	MassMove        *massMoveTable  `json:"mass_move,omitempty"`
	Scale           *scaleTable     `json:"scale,omitempty"`
	Processing      *drainTable     `json:"processing,omitempty"`
}

type meta struct {
	Date           string   `json:"date"`
	GoVersion      string   `json:"go_version"`
	CPUs           int      `json:"cpus"`
	CPUModel       string   `json:"cpu_model"`
	Memory         string   `json:"memory"`
	Cluster        string   `json:"cluster"`
	Runs           int      `json:"runs"`
	Args           []string `json:"args"`
	ZKTimeout      string   `json:"kafkaconsumer_zookeeper_timeout"`
	GroupSession   string   `json:"group_session_timeout"`
	GroupHeartbeat string   `json:"group_heartbeat_interval"`
	// ConsumerSession and ConsumerHeartbeat are the brokers'
	// group.consumer.session.timeout.ms and
	// group.consumer.heartbeat.interval.ms: those of the consumer-protocol
	// groups (KIP-848), when the brokers serve it.
	ConsumerSession   string  `json:"consumer_protocol_session_timeout,omitempty"`
	ConsumerHeartbeat string  `json:"consumer_protocol_heartbeat_interval,omitempty"`
	RebalanceHz       int     `json:"rebalance_produce_rate"`
	Seconds           float64 `json:"seconds"`
}

// drainTable is the result of a drain workload (throughput, group, startup).
type drainTable struct {
	Workload   string `json:"workload"`
	Topic      string `json:"topic,omitempty"`
	Topics     int    `json:"topics,omitempty"`
	Partitions int    `json:"partitions"`
	Messages   int64  `json:"messages,omitempty"`
	Size       int    `json:"size,omitempty"`
	Instances  int    `json:"instances"`
	// Keys and WorkMillis are the processing workload's: distinct keys,
	// and what the handler waits per message.
	Keys       int        `json:"keys,omitempty"`
	WorkMillis float64    `json:"work_ms,omitempty"`
	Rows       []drainRow `json:"rows"`
}

// drainRow holds one contender's figures: each the median over the runs.
type drainRow struct {
	Contender    string  `json:"contender"`
	Seconds      float64 `json:"seconds"`
	MsgsPerSec   float64 `json:"msgs_per_sec,omitempty"`
	MBPerSec     float64 `json:"mb_per_sec,omitempty"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	CPUPerMsgUs  float64 `json:"cpu_us_per_msg,omitempty"`
	PeakRSSMB    float64 `json:"peak_rss_mb"`
	RSSMB        float64 `json:"rss_mb"` // at the end of the interval
	AllocsPerMsg float64 `json:"allocs_per_msg,omitempty"`
	BytesPerMsg  float64 `json:"alloc_bytes_per_msg,omitempty"`
	FirstSeconds float64 `json:"first_message_seconds"`
	Duplicates   float64 `json:"duplicates"`
	// Ratio is the contender's median divided by sarama-raw's median of
	// the same bench run: msgs/s for throughput (higher is better), seconds
	// for start-up (lower is better).
	Ratio float64 `json:"ratio_to_raw,omitempty"`
	// RatioToPeer (the processing workload) is the contender's msgs/s
	// divided by the best of sarama-group's and franz-go's in the same
	// bench run.
	RatioToPeer float64 `json:"ratio_to_best_peer,omitempty"`
	// RatioToWire and RatioToFranz (throughput workloads) are the
	// contender's msgs/s divided by the wire ceiling's and by franz-go's
	// of the same bench run.
	RatioToWire  float64       `json:"ratio_to_wire,omitempty"`
	RatioToFranz float64       `json:"ratio_to_franz_go,omitempty"`
	Runs         []childResult `json:"runs"`
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianOf(rs []childResult, f func(childResult) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return median(xs)
}

// drainRowOf summarises a contender's runs; n and size are the messages
// and their size for the per-message figures (0 for none).
func drainRowOf(contender string, rs []childResult, n int64, size int) drainRow {
	row := drainRow{
		Contender:    contender,
		Runs:         rs,
		Seconds:      medianOf(rs, func(r childResult) float64 { return r.Seconds }),
		CPUSeconds:   medianOf(rs, func(r childResult) float64 { return r.CPUSeconds }),
		PeakRSSMB:    medianOf(rs, func(r childResult) float64 { return float64(r.PeakRSS) / (1 << 20) }),
		RSSMB:        medianOf(rs, func(r childResult) float64 { return float64(r.RSS) / (1 << 20) }),
		FirstSeconds: medianOf(rs, func(r childResult) float64 { return r.FirstSeconds }),
	}
	if n > 0 {
		fn := float64(n)
		row.MsgsPerSec = medianOf(rs, func(r childResult) float64 { return fn / r.Seconds })
		row.MBPerSec = medianOf(rs, func(r childResult) float64 { return fn * float64(size) / r.Seconds / 1e6 })
		row.CPUPerMsgUs = medianOf(rs, func(r childResult) float64 { return r.CPUSeconds / fn * 1e6 })
		row.AllocsPerMsg = medianOf(rs, func(r childResult) float64 { return float64(r.Mallocs) / fn })
		row.BytesPerMsg = medianOf(rs, func(r childResult) float64 { return float64(r.AllocBytes) / fn })
		row.Duplicates = medianOf(rs, func(r childResult) float64 { return float64(r.Received - n) })
	}
	return row
}

func (t *drainTable) setRatios() {
	franzShare := t.row(franzGoShare)
	if t.Workload == "processing" {
		var best float64
		for _, r := range t.Rows {
			if slices.Contains(processingPeers, r.Contender) {
				best = max(best, r.MsgsPerSec)
			}
		}
		for i := range t.Rows {
			r := &t.Rows[i]
			switch {
			case slices.Contains(shareContenders, r.Contender) && franzShare != nil:
				// A share group's peer is franz-go's share consumer.
				r.RatioToPeer = r.MsgsPerSec / franzShare.MsgsPerSec
			case best > 0:
				r.RatioToPeer = r.MsgsPerSec / best
			}
		}
		return
	}
	raw, ceiling, franz := t.row(rawSarama), t.row(wire), t.row(franzGo)
	for i := range t.Rows {
		r := &t.Rows[i]
		franz := franz
		if slices.Contains(shareContenders, r.Contender) {
			franz = franzShare // a share group's ratio is to franz-go's share consumer
		}
		switch {
		case t.Workload == "startup":
			if raw != nil {
				r.Ratio = r.Seconds / raw.Seconds
			}
			continue
		case raw != nil:
			r.Ratio = r.MsgsPerSec / raw.MsgsPerSec
		}
		if ceiling != nil {
			r.RatioToWire = r.MsgsPerSec / ceiling.MsgsPerSec
		}
		if franz != nil {
			r.RatioToFranz = r.MsgsPerSec / franz.MsgsPerSec
		}
	}
}

func (t *drainTable) row(contender string) *drainRow {
	for i := range t.Rows {
		if t.Rows[i].Contender == contender {
			return &t.Rows[i]
		}
	}
	return nil
}

// markdown renders the results as Markdown tables.
func markdown(res *results) string {
	var b strings.Builder
	m := res.Meta
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %s memory, %s. Cluster: %s. Figures are medians of %d runs.\n\n",
		m.CPUs, m.CPUModel, m.Memory, m.GoVersion, m.Cluster, m.Runs)
	for _, t := range []*drainTable{res.Throughput, res.GroupThroughput} {
		if t == nil {
			continue
		}
		fmt.Fprintf(&b, "### Throughput, %d instance(s) in one process: %d messages of %d bytes, %d partitions, ack/mark per message\n\n",
			t.Instances, t.Messages, t.Size, t.Partitions)
		b.WriteString("| contender | msgs/s | MB/s | × wire | × sarama-raw | × franz-go | CPU s | CPU µs/msg | peak RSS MiB | allocs/msg | B alloc/msg | 1st msg s | duplicates |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range t.Rows {
			fmt.Fprintf(&b, "| %s | %.0f | %.1f | %s | %s | %s | %.2f | %.2f | %.0f | %.2f | %.0f | %.2f | %.0f |\n",
				r.Contender, r.MsgsPerSec, r.MBPerSec, ratio(r.RatioToWire), ratio(r.Ratio), ratio(r.RatioToFranz), r.CPUSeconds, r.CPUPerMsgUs, r.PeakRSSMB,
				r.AllocsPerMsg, r.BytesPerMsg, r.FirstSeconds, r.Duplicates)
		}
		b.WriteString("\n")
	}
	if t := res.Rebalance; t != nil {
		fmt.Fprintf(&b, "### Rebalance: %d instances (one process each) on %d partitions, %d msgs/s produced\n\n",
			t.Instances, t.Partitions, t.Rate)
		b.WriteString("Recovery: seconds from the event until every partition is consumed again " +
			"(its new owner received a message produced after the event, and no message is delayed more than " +
			t.Late + " any more). Duplicates: messages handed out a second time after the event.\n\n")
		b.WriteString("| contender | session timeout | join: recovery s | join: dup | leave (Close): recovery s | leave: dup | kill -9: recovery s | kill: dup | lost |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range t.Rows {
			fmt.Fprintf(&b, "| %s | %s", r.Contender, r.SessionTimeout)
			var lost float64
			for _, ev := range events {
				e := r.Events[ev]
				fmt.Fprintf(&b, " | %.2f | %.0f", e.Recovery, e.Duplicates)
				lost += e.Lost
			}
			fmt.Fprintf(&b, " | %.0f |\n", lost)
		}
		b.WriteString("\n")
		if len(t.Rolling) > 0 {
			fmt.Fprintf(&b, "#### Rolling restart: each of the %d instances in turn closed and started again, the next once the group is stable\n\n", t.Instances)
			b.WriteString("Moves: times a partition changed instance over the rollout. Lag peak: the longest a message produced during the rollout waited for its first receipt.\n\n")
			b.WriteString("| contender | InstanceID | RestartGrace | moves | duplicates | lost | lag peak s | rollout s |\n")
			b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|\n")
			for _, r := range t.Rolling {
				fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.0f | %.0f | %.2f | %.1f |\n",
					r.Contender, map[bool]string{true: "yes", false: "no"}[r.InstanceID], r.RestartGrace, r.Moves, r.Duplicates, r.Lost, r.LagPeak, r.Seconds)
			}
			b.WriteString("\n")
		}
	}
	if t := res.Startup; t != nil {
		fmt.Fprintf(&b, "### Start-up: one instance, %d topics × %d partitions = %d partitions\n\n",
			t.Topics, t.Partitions/max(t.Topics, 1), t.Partitions)
		b.WriteString("| contender | s until every partition delivered | ratio to sarama-raw | 1st msg s | CPU s | peak RSS MiB | RSS MiB then |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range t.Rows {
			fmt.Fprintf(&b, "| %s | %.2f | %s | %.2f | %.2f | %.0f | %.0f |\n",
				r.Contender, r.Seconds, ratio(r.Ratio), r.FirstSeconds, r.CPUSeconds, r.PeakRSSMB, r.RSSMB)
		}
		b.WriteString("\n")
	}
	if t := res.MassMove; t != nil {
		fmt.Fprintf(&b, "### Mass move: one instance on %d partitions, a second joins; %d msgs/s produced\n\n", t.Partitions, t.Rate)
		b.WriteString("Recovery: seconds from the second instance's Join until every partition is consumed again " +
			"(as in the rebalance workload: its final owner received a message produced after the Join, and no message is delayed more than " +
			t.Late + " any more). Moved: partitions whose owner changed.\n\n")
		b.WriteString("| contender | session timeout | recovery s | new owner s | last delayed s | moved | duplicates | lost |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range t.Rows {
			fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %.2f | %.0f | %.0f | %.0f |\n",
				r.Contender, r.SessionTimeout, r.Recovery, r.NewOwner, r.LastDelayed, r.Moved, r.Duplicates, r.Lost)
		}
		b.WriteString("\n")
	}
	if t := res.Scale; t != nil && len(t.Changes) > 0 {
		writeScaleChanges(&b, t.Changes)
	} else if t != nil {
		b.WriteString("### Scale: kafkaconsumer instances (goroutines of one process, each with its own ZooKeeper sessions and Kafka clients) on one idle topic\n\n")
		b.WriteString("Seconds until stable (every partition claimed by exactly one instance, its owner by the distribution): per join or leave when one at a time (median / max), the whole phase when all at once. " +
			"ZooKeeper requests: what the server received (srvr), less the idle rate, per join or leave. RSS: resident memory with every instance joined, less that before, per instance.\n\n")
		b.WriteString("| instances | partitions | join one at a time s (median / max) | ZK req per join | leave one at a time s (median / max) | ZK req per leave | join all at once s | ZK req per join | leave all at once s | RSS MiB per instance | idle ZK req/s |\n")
		b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, c := range t.Cells {
			ph := map[string]scalePhase{}
			for _, p := range c.Phases {
				ph[p.Name] = p
			}
			timedOut := func(p scalePhase) string {
				if p.TimedOut {
					return " (timed out)"
				}
				return ""
			}
			fmt.Fprintf(&b, "| %d | %d | %.2f / %.2f%s | %.0f | %.2f / %.2f%s | %.0f | %.2f%s | %.0f | %.2f | %.1f | %.0f |\n",
				c.Instances, c.Partitions,
				ph["join-one"].MedianEvent, ph["join-one"].MaxEvent, timedOut(ph["join-one"]), ph["join-one"].ZKPerEvent,
				ph["leave-one"].MedianEvent, ph["leave-one"].MaxEvent, timedOut(ph["leave-one"]), ph["leave-one"].ZKPerEvent,
				ph["join-all"].Seconds, timedOut(ph["join-all"]), ph["join-all"].ZKPerEvent,
				ph["leave-all"].Seconds, c.RSSPerInstanceMB, c.IdleZKPerSecond)
		}
		b.WriteString("\n")
	}
	if t := res.Processing; t != nil {
		fmt.Fprintf(&b, "### Processing: one instance, a handler that waits %gms per message (an I/O call), %d messages of %d bytes, %d keys, %d partitions\n\n",
			t.WorkMillis, t.Messages, t.Size, t.Keys, t.Partitions)
		b.WriteString("sarama-group and franz-go handle each partition on a goroutine of its own, one message after the other; " +
			"process-N is process.Run by key (ByKey) at Concurrency N. msgs/s: from the first message until every message was handled.\n\n")
		b.WriteString("| contender | msgs/s | ratio to best peer | s | CPU s | CPU µs/msg | peak RSS MiB | allocs/msg | 1st msg s | duplicates |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range t.Rows {
			fmt.Fprintf(&b, "| %s | %.0f | %s | %.2f | %.2f | %.2f | %.0f | %.2f | %.2f | %.0f |\n",
				r.Contender, r.MsgsPerSec, ratio(r.RatioToPeer), r.Seconds, r.CPUSeconds, r.CPUPerMsgUs, r.PeakRSSMB,
				r.AllocsPerMsg, r.FirstSeconds, r.Duplicates)
		}
		if r := t.row(process256); r != nil && r.RatioToPeer > 0 {
			met := "met"
			if r.RatioToPeer < 10 {
				met = "missed"
			}
			fmt.Fprintf(&b, "\nTarget: process-256 at 10 × the best peer or more: %.2f ×, %s.\n", r.RatioToPeer, met)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func ratio(r float64) string {
	if r == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", r)
}
