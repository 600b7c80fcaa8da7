package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// render writes the description of a group to w: indented JSON when
// asJSON is set (the fields of GroupDescription; unknown numbers are
// null), else tables for people.
func render(w io.Writer, desc *GroupDescription, asJSON bool) error {
	if asJSON {
		return writeJSON(w, withEmptySlices(desc))
	}
	ew := &errWriter{w: w}
	kafka := desc.Coordinator == CoordinatorKafka
	consumerProtocol := desc.GroupProtocol == GroupProtocolConsumer
	share := desc.GroupProtocol == GroupProtocolShare
	where := fmt.Sprintf("zookeeper %s, kafka %s", desc.Zookeeper, strings.Join(desc.Brokers, ","))
	if kafka {
		where = "coordinator kafka"
		if desc.CoordinatorBroker != "" {
			where += " at " + desc.CoordinatorBroker
		}
		if consumerProtocol {
			where += ", consumer protocol"
		}
		if share {
			where += ", share group"
		}
		if desc.KafkaState != "" {
			where += ", state " + desc.KafkaState
		}
		if desc.GroupEpoch != nil {
			where += fmt.Sprintf(", group epoch %d", *desc.GroupEpoch)
		}
		if desc.AssignmentEpoch != nil {
			where += fmt.Sprintf(", assignment epoch %d", *desc.AssignmentEpoch)
		}
		if desc.Assignor != "" {
			where += ", assignor " + desc.Assignor
		}
		where += "; "
		if desc.Zookeeper != "" {
			where += "zookeeper " + desc.Zookeeper + ", "
		}
		where += "kafka " + strings.Join(desc.Brokers, ",")
	}
	fmt.Fprintf(ew, "Group %s: %s, %d instance%s, %d partition%s, lag %d (%s)\n",
		desc.Group, desc.State, len(desc.Instances), plural(len(desc.Instances)),
		len(desc.Partitions), plural(len(desc.Partitions)), desc.TotalLag, where)

	fmt.Fprintln(ew)
	switch {
	case len(desc.Instances) == 0 && kafka:
		fmt.Fprintln(ew, "No member is in Kafka's group.")
	case len(desc.Instances) == 0:
		fmt.Fprintln(ew, "No instance is registered.")
	case consumerProtocol || share:
		renderConsumerMembers(ew, desc.Instances, consumerProtocol)
	default:
		// A Kafka-coordinated group's members have no registration time;
		// Kafka names their client and host instead.
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		if kafka {
			fmt.Fprintln(tw, "INSTANCE\tLIBRARY\tSUBSCRIPTION\tCLIENT\tPARTITIONS")
		} else {
			fmt.Fprintln(tw, "INSTANCE\tLIBRARY\tSUBSCRIPTION\tREGISTERED\tPARTITIONS")
		}
		for _, instance := range desc.Instances {
			registered := "-"
			if instance.Registered != nil {
				registered = instance.Registered.UTC().Format(time.RFC3339)
			}
			if kafka {
				registered = formatClient(instance)
			}
			subscription := formatSubscription(instance)
			if instance.Error != "" {
				subscription = "(" + instance.Error + ")"
			}
			library := instance.Library
			if library == "" {
				library = "-"
			}
			id := instance.ID
			switch {
			case instance.InstanceID != "":
				id += " (static " + instance.InstanceID + ")"
			case instance.Static:
				id += " (static)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", id, library, subscription, registered, len(instance.Owned))
		}
		_ = tw.Flush()
	}
	for _, intruder := range desc.Intruders {
		fmt.Fprintf(ew, "Intruder %s: registered in ZooKeeper while Kafka's group coordinator keeps the group; ZooKeeper refuses its claims: stop it.\n", intruder.ID)
	}
	for _, member := range desc.Departed {
		until := "its departure is being recorded"
		if member.Until != nil {
			until = "until " + member.Until.UTC().Format(time.RFC3339)
		}
		names := make([]string, len(member.Partitions))
		for i, tp := range member.Partitions {
			names[i] = fmt.Sprintf("%s/%d", tp.Topic, tp.Partition)
		}
		fmt.Fprintf(ew, "Departed static member %s, awaited %s; its partitions: %s.\n", member.ID, until, strings.Join(names, ", "))
	}

	fmt.Fprintln(ew)
	switch {
	case len(desc.Partitions) == 0:
		fmt.Fprintln(ew, "No partition: the group subscribes to no existing topic and has no committed offsets.")
	case share:
		renderSharePartitions(ew, desc)
	default:
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tPARTITION\tOWNER\tCOMMITTED\tLOG-END\tLAG")
		for _, p := range desc.Partitions {
			owner := "-"
			if p.AwaitingReturn != "" {
				owner = "- (awaiting " + p.AwaitingReturn + ")"
			}
			if p.Owner != "" {
				owner = p.Owner
				if !p.OwnerRegistered && !kafka {
					owner += " (not registered)"
				}
			}
			if p.TargetOwner != "" && p.TargetOwner != p.Owner {
				owner += " (to " + p.TargetOwner + ")"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, owner,
				formatOffset(p.Committed), formatOffset(p.LogEnd), formatOffset(p.Lag))
		}
		fmt.Fprintf(tw, "TOTAL\t\t\t%d\t%d\t%d\n", desc.TotalCommitted, desc.TotalLogEnd, desc.TotalLag)
		_ = tw.Flush()
	}
	for _, p := range desc.Partitions {
		if p.Error != "" {
			fmt.Fprintf(ew, "note: %s/%d: %s\n", p.Topic, p.Partition, p.Error)
		}
	}
	return ew.err
}

// renderSharePartitions writes the partitions of a share group: their
// owners, share-partition start offset, log end, the records in flight
// at most (the log end minus the start offset) and the lag the broker
// reports.
func renderSharePartitions(w io.Writer, desc *GroupDescription) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tOWNERS\tSTART-OFFSET\tLOG-END\tIN-FLIGHT<=\tLAG")
	var inFlight int64
	for _, p := range desc.Partitions {
		owners := "-"
		if len(p.Owners) > 0 {
			owners = strings.Join(p.Owners, ",")
		}
		if p.InFlightAtMost != nil {
			inFlight += *p.InFlightAtMost
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, owners,
			formatOffset(p.ShareStartOffset), formatOffset(p.LogEnd), formatOffset(p.InFlightAtMost), formatOffset(p.Lag))
	}
	fmt.Fprintf(tw, "TOTAL\t\t\t\t%d\t%d\t%d\n", desc.TotalLogEnd, inFlight, desc.TotalLag)
	_ = tw.Flush()
	fmt.Fprintln(w, "IN-FLIGHT<= is LOG-END - START-OFFSET, an upper bound of the records acquired and not yet acknowledged; LAG is the broker's share-partition lag, - when it does not report it.")
}

// renderGroups writes the list of groups to w, as JSON or a table.
func renderGroups(w io.Writer, groups []GroupSummary, asJSON bool) error {
	if asJSON {
		if groups == nil {
			groups = []GroupSummary{}
		}
		return writeJSON(w, groups)
	}
	ew := &errWriter{w: w}
	if len(groups) == 0 {
		fmt.Fprintln(ew, "No consumer group is registered in ZooKeeper or kept by Kafka's group coordinator for kafkaconsumer.")
		return ew.err
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tCOORDINATOR\tPROTOCOL\tINSTANCES")
	for _, g := range groups {
		coordinator, protocol, instances := g.Coordinator, g.GroupProtocol, strconv.Itoa(g.Instances)
		if coordinator == "" {
			coordinator = "-"
		}
		if protocol == "" {
			protocol = "-"
		}
		if g.Error != "" {
			instances = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.Group, coordinator, protocol, instances)
	}
	_ = tw.Flush()
	for _, g := range groups {
		if g.Error != "" {
			fmt.Fprintf(ew, "note: %s: %s\n", g.Group, g.Error)
		}
	}
	return ew.err
}

// renderConsumerMembers writes the members of a consumer-protocol group
// or of a share group: their member epoch, subscription, client, and how
// many partitions they own and, with target, are to own (their target
// assignment: a consumer-protocol group's).
func renderConsumerMembers(w io.Writer, instances []Instance, target bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if target {
		fmt.Fprintln(tw, "INSTANCE\tEPOCH\tSUBSCRIPTION\tCLIENT\tPARTITIONS\tTARGET")
	} else {
		fmt.Fprintln(tw, "INSTANCE\tEPOCH\tSUBSCRIPTION\tCLIENT\tPARTITIONS")
	}
	for _, instance := range instances {
		id := instance.ID
		switch {
		case instance.InstanceID != "":
			id += " (static " + instance.InstanceID + ")"
		case instance.Static:
			id += " (static)"
		}
		if instance.MemberProtocol == GroupProtocolClassic {
			id += " (classic)"
		}
		epoch, targeted := "-", "-"
		if instance.MemberEpoch != nil {
			epoch = strconv.Itoa(int(*instance.MemberEpoch))
		}
		if instance.TargetAssignment != nil {
			targeted = strconv.Itoa(len(*instance.TargetAssignment))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d", id, epoch, formatSubscription(instance), formatClient(instance), len(instance.Owned))
		if target {
			fmt.Fprintf(tw, "\t%s", targeted)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

// withEmptySlices returns desc, or a copy whose nil lists are empty, so
// that scripts see [] rather than null.
func withEmptySlices(desc *GroupDescription) *GroupDescription {
	c := *desc
	if c.Brokers == nil {
		c.Brokers = []string{}
	}
	if c.Partitions == nil {
		c.Partitions = []Partition{}
	}
	c.Instances = make([]Instance, len(desc.Instances))
	for i, instance := range desc.Instances {
		if instance.Owned == nil {
			instance.Owned = []TopicPartition{}
		}
		c.Instances[i] = instance
	}
	return &c
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// formatClient returns a member's "client-id@host", or "-".
func formatClient(instance Instance) string {
	switch {
	case instance.ClientID == "" && instance.ClientHost == "":
		return "-"
	case instance.ClientHost == "":
		return instance.ClientID
	}
	return instance.ClientID + "@" + instance.ClientHost
}

// formatSubscription returns "static: a,b" or "white_list: ^re$"; for a
// member of a Kafka-coordinated group, its topics "a,b", or its regular
// expression "regex: re" (consumer protocol).
func formatSubscription(instance Instance) string {
	if instance.TopicRegex != "" {
		return strings.TrimPrefix(strings.Join(instance.Topics, ",")+" regex: "+instance.TopicRegex, " ")
	}
	if len(instance.Topics) > 0 && len(instance.Subscription) == 0 {
		return strings.Join(instance.Topics, ",")
	}
	keys := make([]string, 0, len(instance.Subscription))
	for k := range instance.Subscription {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if instance.Pattern == "" {
		return strings.Join(keys, ",")
	}
	return instance.Pattern + ": " + strings.Join(keys, ",")
}

func formatOffset(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// errWriter remembers the first write error, so that a sequence of
// Fprintf calls is checked once.
type errWriter struct {
	w   io.Writer
	err error
}

func (ew *errWriter) Write(p []byte) (int, error) {
	if ew.err != nil {
		return 0, ew.err
	}
	n, err := ew.w.Write(p)
	ew.err = err
	return n, err
}
