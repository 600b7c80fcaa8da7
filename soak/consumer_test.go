package main

import (
	"math/rand"
	"slices"
	"testing"
)

// TestConsumerFaults: the consumer-protocol variant has no fault on
// ZooKeeper, and the rolling move only with SOAK_PROTOCOL_MOVE.
func TestConsumerFaults(t *testing.T) {
	kinds := func(s settings) []string {
		var names []string
		for _, f := range faultsFor(s) {
			names = append(names, f.kind)
		}
		return names
	}
	plain := kinds(settings{coordinator: coordinatorConsumer})
	moving := kinds(settings{coordinator: coordinatorConsumer, protocolMove: true})
	for _, k := range plain {
		if zookeeperOnly[k] || ensembleOnly[k] {
			t.Errorf("the consumer variant injects %q, which needs ZooKeeper", k)
		}
	}
	if slices.Contains(plain, kindProtocolMove) {
		t.Errorf("the rolling move without SOAK_PROTOCOL_MOVE")
	}
	if len(moving) != len(plain)+1 || moving[0] != kindProtocolMove {
		t.Errorf("with SOAK_PROTOCOL_MOVE the kinds are %q, want the rolling move first, then %q", moving, plain)
	}
}

// TestMoveTarget: a move that stops part-way is continued towards the same
// protocol; once every instance runs it, the next move turns round.
func TestMoveTarget(t *testing.T) {
	so := &soak{rng: rand.New(rand.NewSource(1))}
	for i := range 3 {
		so.insts = append(so.insts, &instance{name: string(rune('a' + i)), coordinator: coordinatorConsumer})
	}
	so.insts = append(so.insts, &instance{name: "extra", coordinator: coordinatorMigrate, extra: true})
	if got := so.moveTarget(); got != coordinatorKafka {
		t.Fatalf("every instance on the consumer protocol: target %q, want %q", got, coordinatorKafka)
	}
	so.insts[0].coordinator = coordinatorKafka // a move stopped after one
	if got := so.moveTarget(); got != coordinatorKafka {
		t.Fatalf("a move stopped part-way: target %q, want %q (the same)", got, coordinatorKafka)
	}
	so.insts[1].coordinator = coordinatorKafka
	so.insts[2].coordinator = coordinatorKafka
	if got := so.moveTarget(); got != coordinatorConsumer {
		t.Fatalf("every instance moved to classic: target %q, want %q", got, coordinatorConsumer)
	}
}
