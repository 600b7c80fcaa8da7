package main

import (
	"fmt"
	"log"
)

// massMoveTable is the result of the mass-move workload: one instance
// consumes every partition of a topic, a second joins, and about half of
// the partitions move to it.
type massMoveTable struct {
	Partitions int           `json:"partitions"`
	Rate       int           `json:"produce_rate"`
	Late       string        `json:"late_threshold"`
	Rows       []massMoveRow `json:"rows"`
}

type massMoveRow struct {
	Contender      string `json:"contender"`
	SessionTimeout string `json:"session_timeout"`
	// Medians over the runs.
	Recovery    float64       `json:"recovery_seconds"`
	NewOwner    float64       `json:"new_owner_seconds"`
	LastDelayed float64       `json:"last_delayed_seconds"`
	Moved       float64       `json:"moved"`
	Duplicates  float64       `json:"duplicates"`
	Lost        float64       `json:"lost"`
	Runs        []eventResult `json:"runs"`
}

// runMassMove is the mass-move workload: the rebalance workload's method
// (instances in processes of their own, a steady producer, recovery as the
// time until every partition is consumed again by its final owner and no
// message is delayed any more), with one instance on many partitions and
// one event: a second instance joins.
func runMassMove(cl *cluster, o *options) (*massMoveTable, error) {
	parts := int32(o.massMovePartitions)
	topic := fmt.Sprintf("bench.massmove.p%d", parts)
	if err := cl.ensureTopic(topic, parts); err != nil {
		return nil, err
	}
	table := &massMoveTable{Partitions: int(parts), Rate: o.massMoveRate, Late: o.late.String()}
	sc := scenario{name: "massmove", initial: 1, events: []string{"join"}, rate: o.massMoveRate, topic: topic, parts: parts}
	cs := contendersFor(o, groupContenders)
	byContender := map[string][]eventResult{}
	for run := range o.runs {
		for _, c := range rotate(cs, run) {
			r, err := rebalanceRun(cl, o, c, run, sc)
			if err != nil {
				return nil, fmt.Errorf("%s run %d: %w", c, run+1, err)
			}
			e := r["join"]
			byContender[c] = append(byContender[c], e)
			log.Printf("massmove run %d %-14s recovery %5.2fs (new owner %.2fs, last delayed %.2fs) moved %3d dup %5d lost %d phase %.1fs produce lag %.2fs%s",
				run+1, c, e.Recovery, e.NewOwner, e.LastDelayed, e.Moved, e.Duplicates, e.Lost, e.Phase, e.ProduceLag, map[bool]string{true: " TIMED OUT"}[e.TimedOut])
			if e.Delayed != "" {
				log.Printf("  last delayed: %s", e.Delayed)
			}
		}
	}
	for _, c := range cs {
		rs := byContender[c]
		pick := func(f func(eventResult) float64) float64 {
			var xs []float64
			for _, r := range rs {
				xs = append(xs, f(r))
			}
			return median(xs)
		}
		row := massMoveRow{
			Contender:      c,
			SessionTimeout: sessionLabel(cl, o, c),
			Recovery:       pick(func(r eventResult) float64 { return r.Recovery }),
			NewOwner:       pick(func(r eventResult) float64 { return r.NewOwner }),
			LastDelayed:    pick(func(r eventResult) float64 { return r.LastDelayed }),
			Moved:          pick(func(r eventResult) float64 { return float64(r.Moved) }),
			Duplicates:     pick(func(r eventResult) float64 { return float64(r.Duplicates) }),
			Lost:           pick(func(r eventResult) float64 { return float64(r.Lost) }),
			Runs:           rs,
		}
		table.Rows = append(table.Rows, row)
	}
	return table, nil
}
