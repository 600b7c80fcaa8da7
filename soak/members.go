package main

// kafkaMembers are the members of Kafka's group, as stableKafka and
// stableConsumer read them: their client IDs and their assignments.
type kafkaMembers struct {
	n        int
	clients  map[string]int           // members by client ID
	assigned map[string]map[int32]int // members assigned each partition
}

// add counts a member of the client ID.
func (m *kafkaMembers) add(clientID string) {
	if m.clients == nil {
		m.clients = make(map[string]int)
	}
	m.clients[clientID]++
	m.n++
}

// assign counts partitions of a topic assigned to a member.
func (m *kafkaMembers) assign(topic string, partitions []int32) {
	if m.assigned == nil {
		m.assigned = make(map[string]map[int32]int)
	}
	if m.assigned[topic] == nil {
		m.assigned[topic] = make(map[int32]int)
	}
	for _, p := range partitions {
		m.assigned[topic][p]++
	}
}

// membersStable tells whether the members are the running processes, one
// each (a member's client ID names its instance and process,
// childClientID), and every partition of the soak topics is assigned to
// exactly one of them.
func (so *soak) membersStable(m kafkaMembers) bool {
	live := 0
	for _, in := range so.insts {
		if !in.alive() || in.stopped {
			continue
		}
		if m.clients[childClientID(in.name, in.cmd.Process.Pid)] != 1 {
			return false
		}
		live++
	}
	if m.n != live {
		return false
	}
	for t, ps := range so.partitions() {
		for _, p := range ps {
			if m.assigned[t][p] != 1 {
				return false
			}
		}
	}
	return true
}
