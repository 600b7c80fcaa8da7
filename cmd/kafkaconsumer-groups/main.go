// Command kafkaconsumer-groups shows what a consumer group of the
// kafkaconsumer library is doing: its registered instances and their
// subscriptions, which instance owns which partition (both from
// ZooKeeper), and per partition the committed offset, the log-end offset
// and the lag (from Kafka, whose brokers it finds through ZooKeeper). It is
// kafka-consumer-groups.sh --describe for groups coordinated through
// ZooKeeper.
//
// A group that Kafka's group coordinator keeps (Config.Coordinator
// CoordinatorKafka, or a group migrated there) is shown in the same form
// from Kafka: its members, their subscriptions and assignments, its
// state, and the same offsets, with the coordinator named. The tool reads
// it so when the group's coordinator switch says kafka, when the group
// has no instance registered in ZooKeeper and Kafka's group coordinator
// knows it, or when no ZooKeeper is given (--bootstrap-server alone). A
// group of Kafka's consumer group protocol (KIP-848, Kafka 4.0 and later)
// is described with ConsumerGroupDescribe: its members' epochs and
// target assignments, the group epoch, assignment epoch and assignor
// (consumerprotocol.go). A share group (KIP-932, Kafka 4.2 and later) is
// described with ShareGroupDescribe: its members and their assignments,
// and per partition its owners, the share-partition start offset, the
// log end and the records in flight at most (sharegroup.go).
//
// Usage:
//
//	kafkaconsumer-groups --zookeeper host:port[,host:port][/chroot] --group NAME [--json] [--timeout 10s] [KAFKA FLAGS]
//	kafkaconsumer-groups --bootstrap-server host:port[,host:port] --group NAME [--json] [--timeout 10s] [KAFKA FLAGS]
//	kafkaconsumer-groups --zookeeper host:port[,host:port][/chroot] --list [--json]
//	kafkaconsumer-groups --bootstrap-server host:port[,host:port] --list [--json]
//	kafkaconsumer-groups migrate --zookeeper host:port[,host:port][/chroot] --group NAME --to kafka|zookeeper [--wait 2m]
//	kafkaconsumer-groups migrate [--zookeeper ...] [--bootstrap-server ...] --group NAME --to kafka --protocol consumer|classic [--json] [--wait 2m]
//
// migrate moves a running group from ZooKeeper's coordination to Kafka's
// group coordinator, or back (see migrate.go, and the README's "Moving off
// ZooKeeper"). With --protocol it follows the rolling restart that moves
// a Kafka-coordinated group between Kafka's classic and consumer group
// protocols (migrateprotocol.go, docs/consumer-protocol.md).
//
// The Kafka flags say how to reach secured brokers: --tls, --tls-ca,
// --tls-cert, --tls-key, --tls-insecure-skip-verify, --sasl-mechanism
// (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) with --sasl-user and the
// password in $KAFKA_SASL_PASSWORD; the brokers are found through
// ZooKeeper on their first listener of the security protocol that fits
// (or the one --listener names), or given with --bootstrap-server.
//
// --zookeeper defaults to $ZOOKEEPER_PEERS. The exit status is 0 on
// success, 1 on an error (unknown group, cluster unreachable) and 2 on bad
// flags.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses of run.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const usageText = `Usage:
  kafkaconsumer-groups --zookeeper HOST:PORT[,HOST:PORT][/CHROOT] --group NAME [--json] [--timeout D] [KAFKA FLAGS]
  kafkaconsumer-groups --zookeeper HOST:PORT[,HOST:PORT][/CHROOT] --list [--json] [--timeout D]
  kafkaconsumer-groups --bootstrap-server HOST:PORT[,HOST:PORT] --group NAME|--list [...]
  kafkaconsumer-groups migrate --group NAME --to kafka|zookeeper [...]  (migrate --help)

Shows a kafkaconsumer group: its registered instances and subscriptions, which
instance owns which partition (from ZooKeeper), and per partition the committed
offset, log-end offset and lag (from Kafka, brokers found through ZooKeeper).
A group that Kafka's group coordinator keeps (CoordinatorKafka, or migrated) is
read from Kafka: its members, assignments and state; a group of Kafka's consumer
group protocol (KIP-848) also its epochs and target assignments; a share group
(KIP-932) its members, and per partition the share-partition start offset and
the records in flight at most.
--bootstrap-server without --zookeeper reads Kafka alone, for such groups.

Kafka flags, for secured brokers: --tls (implied by any --tls-* flag), --tls-ca,
--tls-cert and --tls-key, --tls-insecure-skip-verify; --sasl-mechanism with
--sasl-user, the password in $KAFKA_SASL_PASSWORD. The brokers are found
through ZooKeeper, on each broker's first listener whose security protocol
fits (SASL_SSL, SSL, SASL_PLAINTEXT or PLAINTEXT) or the one --listener
names; --bootstrap-server skips that.

Flags:
`

// run is the command: it parses args, writes its output to stdout and its
// errors to stderr, and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "migrate" {
		return runMigrate(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("kafkaconsumer-groups", flag.ContinueOnError)
	fs.SetOutput(stderr)
	zookeeper := fs.String("zookeeper", os.Getenv("ZOOKEEPER_PEERS"), "ZooKeeper connection string of the Kafka cluster (default $ZOOKEEPER_PEERS)")
	group := fs.String("group", "", "the consumer group to describe")
	list := fs.Bool("list", false, "list the consumer groups registered in ZooKeeper")
	asJSON := fs.Bool("json", false, "write JSON instead of tables")
	timeout := fs.Duration("timeout", 10*time.Second, "give up when ZooKeeper or Kafka have not answered within this time")
	af, zf := addAccessFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage // the flag package printed the error and usage
	}

	usageError := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "kafkaconsumer-groups: "+format+"\n", args...)
		fmt.Fprintln(stderr, "Run kafkaconsumer-groups --help for usage.")
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usageError("unexpected argument %q", fs.Arg(0))
	case *zookeeper == "" && af.bootstrap == "":
		return usageError("--zookeeper is required (or set ZOOKEEPER_PEERS), or --bootstrap-server alone for a group that Kafka coordinates")
	case *list && *group != "":
		return usageError("give either --list or --group, not both")
	case !*list && *group == "":
		return usageError("--group NAME is required (or --list to list the groups)")
	case *timeout <= 0:
		return usageError("--timeout must be positive, got %s", *timeout)
	}
	if *zookeeper != "" {
		if _, _, err := parseZookeeper(*zookeeper); err != nil {
			return usageError("%s", err)
		}
	}
	access, zkAccess, err := accesses(af, zf)
	if err != nil {
		return usageError("%s", err)
	}

	if *list {
		var groups []GroupSummary
		if groups, err = listGroups(*zookeeper, zkAccess, *timeout, access); err == nil {
			err = renderGroups(stdout, groups, *asJSON)
		}
	} else {
		var desc *GroupDescription
		if desc, err = describeGroup(*zookeeper, zkAccess, *group, *timeout, access); err == nil {
			err = render(stdout, desc, *asJSON)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "kafkaconsumer-groups: %s\n", err)
		return exitError
	}
	return exitOK
}

// addAccessFlags defines the flags of Kafka's and ZooKeeper's access on
// fs, which both the description and migrate take.
func addAccessFlags(fs *flag.FlagSet) (*accessFlags, *zookeeperFlags) {
	af, zf := new(accessFlags), new(zookeeperFlags)
	fs.StringVar(&af.bootstrap, "bootstrap-server", "", "Kafka addresses HOST:PORT[,HOST:PORT] to use instead of the brokers registered in ZooKeeper")
	fs.StringVar(&af.listener, "listener", "", "the registered brokers' listener to use, e.g. EXTERNAL (default: the first whose security protocol fits)")
	fs.BoolVar(&af.tls, "tls", false, "connect to Kafka with TLS")
	fs.StringVar(&af.tlsCA, "tls-ca", "", "PEM file of the CA certificates to trust (default: the system's)")
	fs.StringVar(&af.tlsCert, "tls-cert", "", "PEM file of the client certificate (with --tls-key)")
	fs.StringVar(&af.tlsKey, "tls-key", "", "PEM file of the client certificate's private key")
	fs.BoolVar(&af.tlsInsecure, "tls-insecure-skip-verify", false, "do not verify the brokers' certificates (tests only)")
	fs.StringVar(&af.saslMechanism, "sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; the password is read from $KAFKA_SASL_PASSWORD")
	fs.StringVar(&af.saslUser, "sasl-user", "", "SASL user name")
	fs.StringVar(&zf.tlsCA, "zookeeper-tls-ca", os.Getenv("ZOOKEEPER_TLS_CA"), "connect to ZooKeeper with TLS, trusting the CA certificates of this PEM file (default $ZOOKEEPER_TLS_CA)")
	fs.StringVar(&zf.tlsCert, "zookeeper-tls-cert", os.Getenv("ZOOKEEPER_TLS_CERT"), "connect to ZooKeeper with TLS, with the client certificate of this PEM file (with --zookeeper-tls-key; default $ZOOKEEPER_TLS_CERT)")
	fs.StringVar(&zf.tlsKey, "zookeeper-tls-key", os.Getenv("ZOOKEEPER_TLS_KEY"), "PEM file of the ZooKeeper client certificate's private key (default $ZOOKEEPER_TLS_KEY)")
	fs.StringVar(&zf.digestUser, "zookeeper-digest-user", "", "authenticate to ZooKeeper with its digest scheme as this user; the password is read from $ZOOKEEPER_DIGEST_PASSWORD")
	return af, zf
}

// accesses reads the passwords from the environment and returns the
// accesses the flags give.
func accesses(af *accessFlags, zf *zookeeperFlags) (kafkaAccess, zookeeperAccess, error) {
	af.saslPassword = os.Getenv("KAFKA_SASL_PASSWORD")
	access, err := af.access()
	if err != nil {
		return kafkaAccess{}, zookeeperAccess{}, err
	}
	zf.digestPassword = os.Getenv("ZOOKEEPER_DIGEST_PASSWORD")
	zkAccess, err := zf.access()
	return access, zkAccess, err
}

const migrateUsageText = `Usage:
  kafkaconsumer-groups migrate --zookeeper HOST:PORT[,HOST:PORT][/CHROOT] --group NAME --to kafka|zookeeper [--wait D] [--timeout D] [KAFKA FLAGS]
  kafkaconsumer-groups migrate [--zookeeper ...|--bootstrap-server ...] --group NAME --to kafka --protocol consumer|classic [--json] [--wait D] [...]

Moves a running group from ZooKeeper's coordination to Kafka's group
coordinator (--to kafka), or back (--to zookeeper), without stopping it: it
writes the group's coordinator switch (/consumers/NAME/coordinator), which
every instance of kafkaconsumer (v0.x with Config.Coordinator
CoordinatorZooKeeper) follows, and waits up to --wait for the instances to
move. It refuses, naming them, while an instance that does not follow the
switch is part of the group: an instance of the original wvanbergen/kafka, a
kafkaconsumer too old to migrate, or (--to zookeeper) a member without
ZooKeeper. While Kafka's group rebalances, --to zookeeper waits for it to
settle (within --wait, or --timeout with --wait 0) before it judges the
members: Kafka describes their metadata only while the group is Stable. It
refuses a group whose members use Kafka's consumer protocol (KIP-848): they
run without ZooKeeper. See the README, "Moving off ZooKeeper".

--to kafka --protocol consumer (or classic) is for the move between Kafka's
two group protocols, a rolling restart with Config.GroupProtocol changed
that needs no signal: a group still coordinated by ZooKeeper is switched to
Kafka first (as --to kafka does); then it reports how many members use each
protocol, says how to restart them, and waits up to --wait (shared with the
switch) until every member, at least as many as the group had at the start,
uses that protocol and the group is Stable. Without ZooKeeper (a
CoordinatorKafka group), give --bootstrap-server and --zookeeper= (empty).
--json writes the final state as JSON (progress lines go to stderr). See
docs/consumer-protocol.md.

Flags:
`

// runMigrate is the migrate verb.
func runMigrate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kafkaconsumer-groups migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	zookeeper := fs.String("zookeeper", os.Getenv("ZOOKEEPER_PEERS"), "ZooKeeper connection string of the group (default $ZOOKEEPER_PEERS)")
	group := fs.String("group", "", "the consumer group to migrate")
	to := fs.String("to", "", "the coordinator to move the group to: kafka, or zookeeper to go back")
	protocol := fs.String("protocol", "", "with --to kafka: the group protocol to move Kafka's group to, consumer (KIP-848) or classic; report and wait for the rolling restart")
	asJSON := fs.Bool("json", false, "with --protocol: write the final state as JSON (progress lines go to stderr)")
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for the instances to move, and (--to zookeeper) first for Kafka's group to settle (0: do not wait for the instances)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up when ZooKeeper or Kafka have not answered within this time")
	af, zf := addAccessFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), migrateUsageText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	usageError := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "kafkaconsumer-groups migrate: "+format+"\n", args...)
		fmt.Fprintln(stderr, "Run kafkaconsumer-groups migrate --help for usage.")
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usageError("unexpected argument %q", fs.Arg(0))
	case *zookeeper == "" && (*protocol == "" || af.bootstrap == ""):
		return usageError("--zookeeper is required (or set ZOOKEEPER_PEERS); with --protocol, --bootstrap-server alone will do for a group that Kafka coordinates")
	case *group == "":
		return usageError("--group NAME is required")
	case *to != switchKafka && *to != switchZookeeper:
		return usageError("--to must be kafka or zookeeper, got %q", *to)
	case *protocol != "" && *protocol != GroupProtocolConsumer && *protocol != GroupProtocolClassic:
		return usageError("--protocol must be consumer or classic, got %q", *protocol)
	case *protocol != "" && *to == switchZookeeper:
		return usageError("--protocol goes with --to kafka only: Kafka's group protocols are no matter of ZooKeeper's coordination (a group goes back to ZooKeeper from the classic protocol: migrate --to kafka --protocol classic first)")
	case *asJSON && *protocol == "":
		return usageError("--json goes with --protocol only")
	case *timeout <= 0:
		return usageError("--timeout must be positive, got %s", *timeout)
	case *wait < 0:
		return usageError("--wait must not be negative, got %s", *wait)
	}
	if *zookeeper != "" {
		if _, _, err := parseZookeeper(*zookeeper); err != nil {
			return usageError("%s", err)
		}
	}
	access, zkAccess, err := accesses(af, zf)
	if err != nil {
		return usageError("%s", err)
	}
	if *protocol != "" {
		return runMigrateProtocol(*zookeeper, zkAccess, access, *timeout, migration{group: *group, to: *to, protocol: *protocol, wait: *wait}, *asJSON, stdout, stderr)
	}
	if err := migrateGroup(*zookeeper, zkAccess, access, *timeout, migration{group: *group, to: *to, wait: *wait, out: stdout}); err != nil {
		fmt.Fprintf(stderr, "kafkaconsumer-groups migrate: %s\n", err)
		return exitError
	}
	return exitOK
}

// runMigrateProtocol runs migrate --to kafka --protocol: progress lines
// to stdout, or with asJSON to stderr and the last status as JSON to
// stdout (written also when the wait ran out, with "done": false).
func runMigrateProtocol(zookeeper string, zkAccess zookeeperAccess, access kafkaAccess, timeout time.Duration, m migration, asJSON bool, stdout, stderr io.Writer) int {
	m.out = stdout
	if asJSON {
		m.out = stderr
	}
	st, err := migrateProtocol(zookeeper, zkAccess, access, timeout, m)
	if asJSON && st != nil {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if encErr := enc.Encode(st); encErr != nil && err == nil {
			err = encErr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "kafkaconsumer-groups migrate: %s\n", err)
		return exitError
	}
	return exitOK
}
