// Package zkbrokers reads the Kafka broker registrations that a
// ZooKeeper-mode cluster keeps in /brokers/ids/<id>, and picks the address
// of each broker on the listener a client should use. The library
// (kafkaconsumer.Join) and cmd/kafkaconsumer-groups share it, so that both
// find the same brokers.
//
// A registration is JSON. The layouts met in practice:
//
//   - Kafka 0.8 (version 1): {"host":"b1","port":9092,...}, no endpoints;
//     the address is a PLAINTEXT one.
//   - Kafka 0.9/0.10 (versions 2, 3): "endpoints":["PLAINTEXT://b1:9092",
//     "SSL://b1:9093"]; the listener name is the security protocol.
//   - Kafka 0.10.2 and later (versions 4, 5): listener names are free
//     ("EXTERNAL://b1:9094") and "listener_security_protocol_map" maps each
//     to its protocol ({"EXTERNAL":"SASL_SSL"}). "host" and "port" are
//     those of the first PLAINTEXT endpoint, or null and -1 when no
//     listener uses PLAINTEXT.
package zkbrokers

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Security protocols of Kafka listeners (security.protocol).
const (
	Plaintext     = "PLAINTEXT"
	SSL           = "SSL"
	SASLPlaintext = "SASL_PLAINTEXT"
	SASLSSL       = "SASL_SSL"
)

// Protocol returns the security protocol a client with the given settings
// speaks: SASL_SSL with TLS and SASL, SSL with TLS only, SASL_PLAINTEXT
// with SASL only, PLAINTEXT with neither.
func Protocol(tls, sasl bool) string {
	switch {
	case tls && sasl:
		return SASLSSL
	case tls:
		return SSL
	case sasl:
		return SASLPlaintext
	default:
		return Plaintext
	}
}

// Listener is one advertised endpoint of a broker.
type Listener struct {
	// Name is the listener name, upper case (e.g. PLAINTEXT, EXTERNAL).
	Name string
	// Protocol is its security protocol (one of the constants above, or
	// what the registration says).
	Protocol string
	// Addr is "host:port" (an IPv6 host in brackets).
	Addr string
}

// Registration is a parsed /brokers/ids/<id> node.
type Registration struct {
	// ID is the broker id, the name of the node.
	ID string
	// Listeners are the advertised endpoints in the registration's order.
	// For a registration without endpoints, it is the one PLAINTEXT
	// listener of host and port.
	Listeners []Listener
}

// registrationJSON is the part of a registration that Parse reads. Host is
// a pointer because Kafka writes null when no listener is PLAINTEXT.
type registrationJSON struct {
	Host        *string           `json:"host"`
	Port        int               `json:"port"`
	Endpoints   []string          `json:"endpoints"`
	ProtocolMap map[string]string `json:"listener_security_protocol_map"`
}

// Parse parses the registration of broker id (the node's data). It fails
// on JSON it cannot read and on endpoints it cannot split into a listener
// name, a host and a port; a registration with neither endpoints nor a
// host and port is an error too.
func Parse(id string, data []byte) (Registration, error) {
	reg := Registration{ID: id}
	var raw registrationJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return reg, fmt.Errorf("broker %s: registration %q: %w", id, data, err)
	}
	protocols := make(map[string]string, len(raw.ProtocolMap))
	for name, protocol := range raw.ProtocolMap {
		protocols[strings.ToUpper(name)] = strings.ToUpper(protocol)
	}
	for _, ep := range raw.Endpoints {
		name, hostPort, ok := strings.Cut(ep, "://")
		if !ok || name == "" {
			return reg, fmt.Errorf("broker %s: endpoint %q is not LISTENER://host:port", id, ep)
		}
		host, port, err := net.SplitHostPort(hostPort)
		if err != nil {
			return reg, fmt.Errorf("broker %s: endpoint %q: %w", id, ep, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return reg, fmt.Errorf("broker %s: endpoint %q has an invalid port", id, ep)
		}
		name = strings.ToUpper(name)
		protocol, ok := protocols[name]
		if !ok {
			// Before listener names (Kafka 0.10.1 and older), the name
			// is the protocol.
			protocol = name
		}
		reg.Listeners = append(reg.Listeners, Listener{Name: name, Protocol: protocol, Addr: net.JoinHostPort(host, port)})
	}
	if len(raw.Endpoints) == 0 {
		if raw.Host == nil || *raw.Host == "" || raw.Port <= 0 || raw.Port > 65535 {
			return reg, fmt.Errorf("broker %s: registration %q has neither endpoints nor a host and port", id, data)
		}
		reg.Listeners = []Listener{{Name: Plaintext, Protocol: Plaintext, Addr: net.JoinHostPort(*raw.Host, strconv.Itoa(raw.Port))}}
	}
	return reg, nil
}

// ErrNoListener is returned by Select when no broker has a listener that
// fits; the error it returns wrapping it names the listeners found.
var ErrNoListener = errors.New("no broker has a matching listener")

// Selection is what Select chose.
type Selection struct {
	// Addrs are the chosen addresses, one per broker that has a fitting
	// listener, in the order of the registrations.
	Addrs []string
	// Listeners are the names of the chosen listeners, sorted, without
	// repeats (usually one).
	Listeners []string
	// Skipped are the IDs of the brokers without a fitting listener.
	Skipped []string
}

// Select picks an address of each broker: that of the listener named
// listener when it is not empty (compared without regard to case, as
// Kafka upper-cases listener names), otherwise that of the broker's first
// listener whose security protocol is protocol. Brokers without such a
// listener are skipped (Selection.Skipped). When no broker has one, it
// returns an error wrapping ErrNoListener that names the listeners found
// and what was wanted.
func Select(regs []Registration, listener, protocol string) (Selection, error) {
	var sel Selection
	chosen := make(map[string]bool)
	found := make(map[string]bool)
	for _, reg := range regs {
		var match *Listener
		for i, l := range reg.Listeners {
			found[l.Name+" ("+l.Protocol+")"] = true
			if match != nil {
				continue
			}
			if listener != "" && strings.EqualFold(l.Name, listener) || listener == "" && l.Protocol == protocol {
				match = &reg.Listeners[i]
			}
		}
		if match == nil {
			sel.Skipped = append(sel.Skipped, reg.ID)
			continue
		}
		sel.Addrs = append(sel.Addrs, match.Addr)
		chosen[match.Name] = true
	}
	sel.Listeners = slices.Sorted(maps.Keys(chosen))
	if len(sel.Addrs) > 0 {
		return sel, nil
	}
	want := "a listener with security protocol " + protocol
	if listener != "" {
		want = "listener " + strings.ToUpper(listener)
	}
	have := "none"
	if len(found) > 0 {
		have = strings.Join(slices.Sorted(maps.Keys(found)), ", ")
	}
	return sel, fmt.Errorf("%w: want %s; the %d registered broker(s) have %s", ErrNoListener, want, len(regs), have)
}

// Read reads every registration under /brokers/ids, sorted by broker ID,
// with children and get, which list a node's children and read a node's
// data (relative to the cluster's chroot; a missing node is not an error:
// get reports it with exists false, and the broker is left out, as it
// deregistered meanwhile).
func Read(children func(node string) ([]string, error), get func(node string) (data []byte, exists bool, err error)) ([]Registration, error) {
	ids, err := children("/brokers/ids")
	if err != nil {
		return nil, err
	}
	SortIDs(ids)
	regs := make([]Registration, 0, len(ids))
	for _, id := range ids {
		data, exists, err := get("/brokers/ids/" + id)
		if err != nil {
			return nil, err
		}
		if !exists {
			continue
		}
		reg, err := Parse(id, data)
		if err != nil {
			return nil, err
		}
		regs = append(regs, reg)
	}
	return regs, nil
}

// SortIDs sorts broker IDs numerically (IDs that are not numbers last, by
// name), the order Select's result should follow.
func SortIDs(ids []string) {
	sort.SliceStable(ids, func(i, j int) bool {
		a, errA := strconv.Atoi(ids[i])
		b, errB := strconv.Atoi(ids[j])
		switch {
		case errA == nil && errB == nil:
			return a < b
		case errA == nil || errB == nil:
			return errA == nil
		default:
			return ids[i] < ids[j]
		}
	})
}
