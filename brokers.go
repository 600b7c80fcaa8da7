package kafkaconsumer

// Broker discovery: the Kafka addresses Join bootstraps sarama's client
// from, either Config.Brokers or the brokers' registrations in ZooKeeper,
// on the listener that fits the sarama configuration.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"

	"github.com/kafkaconsumer/kafkaconsumer/internal/zkbrokers"
)

// discoverBrokers returns the addresses to bootstrap sarama's client from:
// Config.Brokers when set; otherwise, for each broker registered in
// ZooKeeper, the address of its listener named Config.Listener or, without
// one, of its first listener whose security protocol is the one the
// sarama configuration speaks (see Config.Listener). It logs what it
// chose. It reads ZooKeeper through conn, Join's probe connection (kazoo-go
// does not share its own), and gives up after Zookeeper.Timeout. Errors
// wrap ErrNoBrokers when no broker fits.
func (cm *consumerManager) discoverBrokers(conn *zk.Conn) ([]string, error) {
	if cm.config.Discovery == DiscoverFromKafka {
		cm.logf(slog.LevelInfo, "Using the configured Kafka brokers %s; topics and partitions from Kafka's metadata every %s (DiscoverFromKafka).",
			strings.Join(cm.config.Brokers, ","), cm.config.DiscoveryInterval)
		return append([]string(nil), cm.config.Brokers...), nil
	}
	if len(cm.config.Brokers) > 0 {
		cm.logf(slog.LevelInfo, "Using the configured Kafka brokers %s (no discovery through ZooKeeper).", strings.Join(cm.config.Brokers, ","))
		return append([]string(nil), cm.config.Brokers...), nil
	}
	regs, err := readBrokerRegistrations(conn, cm.config.Zookeeper)
	if err != nil {
		return nil, fmt.Errorf("read kafka broker registrations in zookeeper: %w", err)
	}
	if len(regs) == 0 {
		return nil, fmt.Errorf("%w: zookeeper lists none under %s/brokers/ids; if the Kafka cluster runs in KRaft mode (Kafka 4 always does), its brokers register in Kafka, not in ZooKeeper: set Config.Discovery to DiscoverFromKafka and Config.Brokers to its bootstrap addresses",
			ErrNoBrokers, cm.config.Zookeeper.Chroot)
	}
	protocol := cm.config.securityProtocol()
	sel, err := zkbrokers.Select(regs, cm.config.Listener, protocol)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoBrokers, err)
	}
	if len(sel.Skipped) > 0 {
		cm.logf(slog.LevelWarn, "Kafka brokers %s have no fitting listener; left out.", strings.Join(sel.Skipped, ","))
	}
	cm.logf(slog.LevelInfo, "Discovered Kafka cluster at %s (listener %s, security protocol %s).",
		strings.Join(sel.Addrs, ","), strings.Join(sel.Listeners, ","), protocol)
	return sel.Addrs, nil
}

// currentBrokers returns the addresses to open a Kafka client on after
// Join, read afresh at each call: those that the instance's discovery
// names now (Config.Brokers when set, as discoverBrokers takes them;
// else the brokers registered in ZooKeeper now, read through the
// instance's session within zkTimeout, on the listener that
// discoverBrokers picks), then those that the first client knows, without
// repeats. sarama drops from the client every broker it failed to reach,
// so the client alone can know none while the cluster is up. It returns
// an error only when it has no address: then that of the ZooKeeper read,
// or one wrapping ErrNoBrokers. Manager goroutine only.
func (cm *consumerManager) currentBrokers() ([]string, error) {
	var (
		addrs   []string
		problem error
		seen    = make(map[string]bool)
		add     = func(addr string) {
			if !seen[addr] {
				seen[addr] = true
				addrs = append(addrs, addr)
			}
		}
	)
	if len(cm.config.Brokers) > 0 {
		for _, addr := range cm.config.Brokers {
			add(addr)
		}
	} else if cm.config.Discovery == DiscoverFromZookeeper {
		sel, err := cm.registeredBrokers()
		for _, addr := range sel {
			add(addr)
		}
		problem = err
	}
	if cm.client != nil {
		for _, b := range cm.client.Brokers() {
			add(b.Addr())
		}
	}
	switch {
	case len(addrs) > 0:
		return addrs, nil
	case problem != nil:
		return nil, problem
	}
	return nil, fmt.Errorf("%w: none registered in zookeeper under %s/brokers/ids, and the client knows none", ErrNoBrokers, cm.config.Zookeeper.Chroot)
}

// registeredBrokers reads the brokers registered in ZooKeeper through the
// instance's session, within zkTimeout, and returns the address of each
// on the listener that discoverBrokers picks.
func (cm *consumerManager) registeredBrokers() ([]string, error) {
	children, get := brokerReaders(cm.zkConn, cm.config.Zookeeper.Chroot, func(err error) error { return err })
	var regs []zkbrokers.Registration
	err := cm.zkCall(cm.zkTimeout(), func() (err error) {
		regs, err = zkbrokers.Read(children, get)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read kafka broker registrations in zookeeper: %w", convertError(err))
	}
	sel, err := zkbrokers.Select(regs, cm.config.Listener, cm.config.securityProtocol())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoBrokers, err)
	}
	return sel.Addrs, nil
}

// securityProtocol returns the Kafka security protocol that the sarama
// configuration speaks: SASL_SSL, SSL, SASL_PLAINTEXT or PLAINTEXT.
func (c *Config) securityProtocol() string {
	return zkbrokers.Protocol(c.Net.TLS.Enable, c.Net.SASL.Enable)
}

// readBrokerRegistrations reads and parses /brokers/ids/* under the
// chroot of config through conn, within config.Timeout (after which conn
// is closed).
func readBrokerRegistrations(conn *zk.Conn, config *kazoo.Config) (regs []zkbrokers.Registration, err error) {
	timedOut := func(err error) error {
		if errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrClosing) {
			return fmt.Errorf("%w: no answer within %s (Zookeeper.Timeout)", ErrZookeeperUnreachable, config.Timeout)
		}
		return err
	}
	children, get := brokerReaders(conn, config.Chroot, timedOut)
	err = withDeadline(conn, config.Timeout, func() error {
		regs, err = zkbrokers.Read(children, get)
		return err
	})
	return regs, err
}

// zkReader is what zkbrokers.Read's readers need of a ZooKeeper
// connection.
type zkReader interface {
	Children(path string) ([]string, *zk.Stat, error)
	Get(path string) ([]byte, *zk.Stat, error)
}

// brokerReaders returns zkbrokers.Read's readers of the nodes under
// chroot through conn: a missing node reads as none, and every other
// error goes through wrap.
func brokerReaders(conn zkReader, chroot string, wrap func(error) error) (children func(string) ([]string, error), get func(string) ([]byte, bool, error)) {
	children = func(node string) ([]string, error) {
		ids, _, err := conn.Children(chroot + node)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		return ids, wrap(err)
	}
	get = func(node string) ([]byte, bool, error) {
		data, _, err := conn.Get(chroot + node)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, false, nil
		}
		return data, err == nil, wrap(err)
	}
	return children, get
}

// validateBrokerAddr checks one entry of Config.Brokers: "host:port" or
// "[ipv6]:port", with a port in 1-65535.
func validateBrokerAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if host == "" || strings.ContainsAny(host, " \t/") {
		return fmt.Errorf("%q has an empty or malformed host", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return fmt.Errorf("%q has an invalid port", addr)
	}
	return nil
}

// validListenerName reports whether name can be a Kafka listener name:
// letters, digits, '_' and '-'.
func validListenerName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
