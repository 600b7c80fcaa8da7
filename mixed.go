package kafkaconsumer

// Mixed groups: instances of the original wvanbergen/kafka kafkaconsumer and
// of this package in one group, as during an upgrade (or its rollback) one
// instance at a time.
//
// Both kinds distribute the same way, over the partition lists they see.
// Those differ for the white and black lists: the original's select
// Kafka's internal topics too. So that every instance computes the same
// distribution, this package marks its own registration (the "client"
// field, which the original ignores), and while any instance without the
// mark is registered, distributes over the partition list the original
// sees: internal topics included. It claims the internal topics'
// partitions that fall to it, but does not consume them (claim-only
// partitions: see partitionManager.claimOnly). With only marked instances registered, the
// internal topics are left out, as ever.

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// registrationClient is the value of the "client" field that marks the
// registrations of this package's instances.
const registrationClient = "github.com/kafkaconsumer/kafkaconsumer"

// migrationVersion is the value of the "migration" field that marks the
// registrations of instances that follow the group's coordinator switch
// (coordinator_migrate.go): the groups tool's migrate refuses to switch a
// group while an instance without it is registered.
const migrationVersion = 1

// markRegistration adds the "client" field, and the "migration" field, to
// a registration, unless it has a "client" field. A registration that is not a JSON object (a custom Subscription's)
// is returned as it is: the other instances then take this one for an
// original, which costs nothing but the internal topics' claims.
func markRegistration(data []byte) []byte {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return data
	}
	if _, ok := fields["client"]; ok {
		return data
	}
	fields["client"], _ = json.Marshal(registrationClient)
	fields["migration"], _ = json.Marshal(migrationVersion)
	marked, err := json.Marshal(fields)
	if err != nil {
		return data
	}
	return marked
}

// isMarkedRegistration tells whether a registration is one of this
// package's instances.
func isMarkedRegistration(data []byte) bool {
	var reg struct {
		Client string `json:"client"`
	}
	return json.Unmarshal(data, &reg) == nil && reg.Client == registrationClient
}

// originalsRegistered tells whether any of the instances is one of the
// original library (its registration has no mark). It reads the
// registrations of the instances it has not seen before, and remembers
// the answer for as long as they are registered. It reads them through
// the session of the instance's own registration (session.go): kazoo-go
// cannot parse a registration whose timestamp is a string. Used by the
// manager goroutine only.
func (cm *consumerManager) originalsRegistered(instances kazoo.ConsumergroupInstanceList) (bool, error) {
	if cm.marked == nil {
		cm.marked = map[string]bool{cm.instance.ID: true}
	}
	registered := make(map[string]bool, len(instances))
	originals := false
	for _, instance := range instances {
		marked, known := cm.marked[instance.ID]
		if !known {
			data, _, err := cm.zkConn.Get(cm.groupNode("ids", instance.ID))
			if errors.Is(err, zk.ErrNoNode) {
				continue // gone already: the instances' watch fires
			} else if err != nil {
				return false, fmt.Errorf("read the registration of instance %s: %w", instance.ID, err)
			}
			marked = isMarkedRegistration(data)
			cm.marked[instance.ID] = marked
			if !marked {
				cm.logf(slog.LevelInfo, "Instance %s is one of the original library (its registration has no %q field).", instance.ID, "client")
			}
		}
		registered[instance.ID] = true
		originals = originals || !marked
	}
	for id := range cm.marked {
		if !registered[id] && id != cm.instance.ID {
			delete(cm.marked, id)
		}
	}
	return originals, nil
}

// claimOnlyTopic tells whether the partitions of topic are claimed but not
// consumed: an internal topic that only the original's lists select.
func (cm *consumerManager) claimOnlyTopic(topic string, originals bool) bool {
	_, pattern := cm.subscription.(*regexpSubscription)
	return originals && pattern && internalTopics[topic]
}
