// Command kafkaconsumer-groups shows what a consumer group of the
// kafkaconsumer library is doing: its registered instances and their
// subscriptions, which instance owns which partition (both from
// ZooKeeper), and per partition the committed offset, the log-end offset
// and the lag (from Kafka, whose brokers it finds through ZooKeeper). It is
// kafka-consumer-groups.sh --describe for groups coordinated through
// ZooKeeper.
//
// Usage:
//
//	kafkaconsumer-groups --zookeeper host:port[,host:port][/chroot] --group NAME [--json] [--timeout 10s]
//	kafkaconsumer-groups --zookeeper host:port[,host:port][/chroot] --list [--json]
//
// --zookeeper defaults to $ZOOKEEPER_PEERS. The exit status is 0 on
// success, 1 on an error (unknown group, cluster unreachable) and 2 on bad
// flags.
package main

import (
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
  kafkaconsumer-groups --zookeeper HOST:PORT[,HOST:PORT][/CHROOT] --group NAME [--json] [--timeout D]
  kafkaconsumer-groups --zookeeper HOST:PORT[,HOST:PORT][/CHROOT] --list [--json] [--timeout D]

Shows a kafkaconsumer group: its registered instances and subscriptions, which
instance owns which partition (from ZooKeeper), and per partition the committed
offset, log-end offset and lag (from Kafka, brokers found through ZooKeeper).

Flags:
`

// run is the command: it parses args, writes its output to stdout and its
// errors to stderr, and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kafkaconsumer-groups", flag.ContinueOnError)
	fs.SetOutput(stderr)
	zookeeper := fs.String("zookeeper", os.Getenv("ZOOKEEPER_PEERS"), "ZooKeeper connection string of the Kafka cluster (default $ZOOKEEPER_PEERS)")
	group := fs.String("group", "", "the consumer group to describe")
	list := fs.Bool("list", false, "list the consumer groups registered in ZooKeeper")
	asJSON := fs.Bool("json", false, "write JSON instead of tables")
	timeout := fs.Duration("timeout", 10*time.Second, "give up when ZooKeeper or Kafka have not answered within this time")
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
	case *zookeeper == "":
		return usageError("--zookeeper is required (or set ZOOKEEPER_PEERS)")
	case *list && *group != "":
		return usageError("give either --list or --group, not both")
	case !*list && *group == "":
		return usageError("--group NAME is required (or --list to list the groups)")
	case *timeout <= 0:
		return usageError("--timeout must be positive, got %s", *timeout)
	}
	if _, _, err := parseZookeeper(*zookeeper); err != nil {
		return usageError("%s", err)
	}

	var err error
	if *list {
		var groups []GroupSummary
		if groups, err = listGroups(*zookeeper, *timeout); err == nil {
			err = renderGroups(stdout, groups, *asJSON)
		}
	} else {
		var desc *GroupDescription
		if desc, err = describeGroup(*zookeeper, *group, *timeout); err == nil {
			err = render(stdout, desc, *asJSON)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "kafkaconsumer-groups: %s\n", err)
		return exitError
	}
	return exitOK
}
