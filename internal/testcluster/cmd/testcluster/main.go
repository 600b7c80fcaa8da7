// Command testcluster starts and stops the local ZooKeeper-mode Kafka
// cluster that `make cluster-up` / `make cluster-down` / `make test` use.
//
//	testcluster [-dir .cluster] up [-zookeepers N] [-brokers N] [-security plaintext|sasl_ssl|mixed] [-mode zookeeper|kraft]
//	                               [-zookeeper-security plaintext|tls] [-kafka-version X.Y.Z] [-zookeeper-version X.Y.Z]
//	testcluster [-dir .cluster] down
//	testcluster [-dir .cluster] status | env
//	testcluster [-dir .cluster] stop-broker|kill-broker|start-broker N
//	testcluster [-dir .cluster] stop-zookeeper|kill-zookeeper|start-zookeeper N
//	testcluster [-dir .cluster] create-topic NAME PARTITIONS [REPLICATION]
//	testcluster jars
//	testcluster zookeeper-tls-files DIR [HOST ...]
//
// up starts the JVMs detached and returns; the cluster's state is kept in
// DIR/state.json, and DIR/env holds the lines to source:
//
//	export ZOOKEEPER_PEERS=127.0.0.1:…
//	export KAFKA_PEERS=127.0.0.1:…,…
//	export KAFKA_VERSION=3.9.1
//	export ZOOKEEPER_VERSION=3.8.4   (only when a ZooKeeper version was given)
//	export KAFKA_MODE=kraft          (only with -mode kraft)
//
// -mode kraft (default $MODE) runs KRaft brokers (each a combined broker
// and controller, storage formatted with kafka.tools.StorageTool) from the
// same Kafka jars, next to a stand-alone ZooKeeper that only the consumer
// groups use; Kafka 4 (KAFKA_VERSION=4.1.1) runs only so, its ZooKeeper
// from ZooKeeper's own jars (default 3.8.4).
//
// The versions default to $KAFKA_VERSION (else 3.9.1) and
// $ZOOKEEPER_VERSION (else the ZooKeeper server the Kafka release brings,
// from the Kafka jars); a given ZooKeeper version runs from its own jars.
// The tests read KAFKA_VERSION for sarama's Config.Version. jars fetches
// the jars of those versions.
//
// A secured cluster (-security sasl_ssl: the only listener SASL_SSL with
// SCRAM-SHA-512; mixed: PLAINTEXT and a SASL_SSL listener named EXTERNAL)
// adds to DIR/env:
//
//	export KAFKA_SECURITY=sasl_ssl
//	export KAFKA_TLS_CA=DIR/tls/ca.pem
//	export KAFKA_SASL_MECHANISM=SCRAM-SHA-512
//	export KAFKA_SASL_USER=admin
//	export KAFKA_SASL_PASSWORD=…
//
// With sasl_ssl, KAFKA_PEERS are the SASL_SSL addresses; with mixed,
// KAFKA_PEERS are the PLAINTEXT ones and KAFKA_SASL_SSL_PEERS the
// SASL_SSL ones.
//
// -zookeeper-security tls (default $ZOOKEEPER_SECURITY, or plaintext) runs
// ZooKeeper with a TLS client port only, which requires a client
// certificate (x509 identities; Kafka 2.5 or later, ZooKeeper 3.5.5 or
// later); ZOOKEEPER_PEERS are then the TLS addresses, and DIR/env adds
// the CA and two client certificates, each with its key (the first is the
// identity CN=kafkaconsumer-group-a, the second CN=kafkaconsumer-group-b):
//
//	export ZOOKEEPER_SECURITY=tls
//	export ZOOKEEPER_TLS_CA=DIR/tls/ca.pem
//	export ZOOKEEPER_TLS_CERT=DIR/tls/zookeeper-client-cert.pem
//	export ZOOKEEPER_TLS_KEY=DIR/tls/zookeeper-client-key.pem
//	export ZOOKEEPER_TLS_CERT2=DIR/tls/zookeeper-client2-cert.pem
//	export ZOOKEEPER_TLS_KEY2=DIR/tls/zookeeper-client2-key.pem
//
// zookeeper-tls-files writes the certificates of -zookeeper-security tls
// (new ones, starting nothing) in DIR, for a ZooKeeper run elsewhere: the
// zookeeper-tls profile of docker-compose.yml, whose ZooKeeper's
// certificate must also name the host the broker dials (HOST).
//
// up is idempotent: when a healthy cluster of the requested size and
// security runs already, it only rewrites DIR/env. The sizes default to
// $ZOOKEEPERS and $BROKERS, or 1; the security to $SECURITY (and
// $ZOOKEEPER_SECURITY), or plaintext. up creates the topics test.1, test.4 and test.64 (1, 4 and
// 64 partitions, replicated on every broker).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

var began = time.Now()

func logf(format string, args ...any) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(began).Seconds(), strings.TrimPrefix(fmt.Sprintf(format, args...), "testcluster: "))
}

func main() {
	// Keep going when stdout is a closed pipe (`testcluster up | head`):
	// dying halfway through starting a detached cluster would orphan JVMs.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	dir := flag.String("dir", ".cluster", "directory of the cluster's state, data and logs")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, `usage: testcluster [-dir DIR] COMMAND [ARGS]

commands:
  up [-zookeepers N] [-brokers N] [-security plaintext|sasl_ssl|mixed] [-mode zookeeper|kraft]
     [-zookeeper-security plaintext|tls] [-kafka-version X.Y.Z] [-zookeeper-version X.Y.Z]
     [-zookeeper-tick-ms N]
                                    start a detached cluster (default $ZOOKEEPERS/$BROKERS or 1,
                                    $SECURITY and $ZOOKEEPER_SECURITY or plaintext,
                                    ZooKeeper's tickTime $ZOOKEEPER_TICK_MS or 500 ms),
                                    create test.1, test.4, test.64,
                                    write DIR/env (versions: $KAFKA_VERSION or 3.9.1,
                                    $ZOOKEEPER_VERSION or Kafka's own ZooKeeper)
  down                              kill the cluster and remove DIR
  status                            show the nodes and their pids
  env                               print DIR/env
  stop-broker N | kill-broker N | start-broker N
  stop-zookeeper N | kill-zookeeper N | start-zookeeper N
  create-topic NAME PARTITIONS [REPLICATION]
  jars                              fetch the jars of $KAFKA_VERSION (and $ZOOKEEPER_VERSION)
                                    with Maven and print their directories
  zookeeper-tls-files DIR [HOST ...]
                                    write new certificates of -zookeeper-security tls in DIR
                                    (ZooKeeper's also for HOST), for docker-compose.yml
`)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*dir, flag.Arg(0), flag.Args()[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testcluster:", strings.TrimPrefix(err.Error(), "testcluster: "))
		os.Exit(1)
	}
}

func run(dir, command string, args []string) error {
	switch command {
	case "jars":
		kafka, zookeeper := testcluster.VersionsFromEnv()
		zookeeper = testcluster.ZooKeeperVersionFor(kafka, zookeeper)
		d, err := testcluster.EnsureKafkaJars(kafka)
		if err != nil {
			return err
		}
		fmt.Println(d)
		if zookeeper != "" {
			if d, err = testcluster.EnsureZooKeeperJars(zookeeper); err != nil {
				return err
			}
			fmt.Println(d)
		}
		return nil
	case "up":
		return up(dir, args)
	case "zookeeper-tls-files":
		if len(args) < 1 {
			return errors.New("usage: zookeeper-tls-files DIR [HOST ...]")
		}
		f, err := testcluster.WriteZooKeeperTLSFiles(args[0], args[1:]...)
		if err != nil {
			return err
		}
		for _, p := range []string{f.CA, filepath.Join(args[0], testcluster.ZooKeeperServerKeyStoreFile),
			filepath.Join(args[0], testcluster.ZooKeeperBrokerKeyStoreFile), f.Cert, f.Key, f.Cert2, f.Key2} {
			fmt.Println(p)
		}
		return nil
	case "down":
		return down(dir)
	case "env":
		b, err := os.ReadFile(filepath.Join(dir, "env"))
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(b)
		return err
	case "status":
		c, err := testcluster.Load(dir)
		if err != nil {
			return err
		}
		for _, line := range c.Status() {
			fmt.Println(line)
		}
		if err := c.Healthy(5 * time.Second); err != nil {
			fmt.Println("unhealthy:", firstLine(err.Error()))
		} else {
			fmt.Println("healthy")
		}
		return nil
	case "create-topic":
		if len(args) < 2 || len(args) > 3 {
			return errors.New("usage: create-topic NAME PARTITIONS [REPLICATION]")
		}
		c, err := load(dir)
		if err != nil {
			return err
		}
		partitions, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		replication := len(c.KafkaPeers())
		if len(args) == 3 {
			if replication, err = strconv.Atoi(args[2]); err != nil {
				return err
			}
		}
		return c.CreateTopic(args[0], int32(partitions), int16(replication))
	}
	ops := map[string]func(*testcluster.Cluster, int) error{
		"stop-broker":     (*testcluster.Cluster).StopBroker,
		"kill-broker":     (*testcluster.Cluster).KillBroker,
		"start-broker":    (*testcluster.Cluster).StartBroker,
		"stop-zookeeper":  (*testcluster.Cluster).StopZooKeeper,
		"kill-zookeeper":  (*testcluster.Cluster).KillZooKeeper,
		"start-zookeeper": (*testcluster.Cluster).StartZooKeeper,
	}
	op, ok := ops[command]
	if !ok {
		return fmt.Errorf("unknown command %q (try -h)", command)
	}
	if len(args) != 1 {
		return fmt.Errorf("usage: %s N", command)
	}
	i, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	c, err := load(dir)
	if err != nil {
		return err
	}
	return op(c, i)
}

func load(dir string) (*testcluster.Cluster, error) {
	c, err := testcluster.Load(dir)
	if err != nil {
		return nil, err
	}
	c.SetLogf(logf)
	return c, nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func up(dir string, args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	zookeepers := fs.Int("zookeepers", envInt("ZOOKEEPERS", 1), "number of ZooKeeper nodes (1 or 3; default $ZOOKEEPERS)")
	brokers := fs.Int("brokers", envInt("BROKERS", 1), "number of Kafka brokers (1 or 3; default $BROKERS)")
	security := fs.String("security", os.Getenv("SECURITY"), "listeners: plaintext, sasl_ssl or mixed (default $SECURITY, or plaintext)")
	zookeeperSecurity := fs.String("zookeeper-security", os.Getenv("ZOOKEEPER_SECURITY"),
		"ZooKeeper's client port: plaintext, or tls (TLS only, client certificates required) (default $ZOOKEEPER_SECURITY, or plaintext)")
	kafkaDefault, zookeeperDefault := testcluster.VersionsFromEnv()
	kafkaVersion := fs.String("kafka-version", kafkaDefault, "Kafka release (default $KAFKA_VERSION, or "+testcluster.DefaultKafkaVersion+")")
	zookeeperVersion := fs.String("zookeeper-version", zookeeperDefault, "ZooKeeper release, run from its own jars (default $ZOOKEEPER_VERSION, or the one the Kafka release brings)")
	tickMs := fs.Int("zookeeper-tick-ms", envInt("ZOOKEEPER_TICK_MS", 0),
		"ZooKeeper's tickTime in ms; minSessionTimeout is 2 ticks, and a session expires up to a tick after its timeout (default $ZOOKEEPER_TICK_MS, or 500; production ensembles run about 2000)")
	mode := fs.String("mode", os.Getenv("MODE"), "zookeeper or kraft: KRaft brokers (combined broker and controller) next to a stand-alone ZooKeeper for the groups (default $MODE, or zookeeper; Kafka 4 needs kraft)")
	_ = fs.Parse(args)
	if *mode == "" {
		*mode = testcluster.ModeZooKeeper
	}
	if *security == "" {
		*security = testcluster.SecurityPlaintext
	}
	if *zookeeperSecurity == "" {
		*zookeeperSecurity = testcluster.ZooKeeperSecurityPlaintext
	}
	if *tickMs < 0 {
		return fmt.Errorf("-zookeeper-tick-ms %d is negative", *tickMs)
	}
	tick := time.Duration(*tickMs) * time.Millisecond
	if tick == 0 {
		tick = testcluster.DefaultZooKeeperTickTime
	}

	if c, err := testcluster.Load(dir); err == nil {
		switch {
		case c.Mode() != *mode:
			logf("a %s-mode cluster runs in %s; replacing it", c.Mode(), dir)
		case c.Security() != *security:
			logf("a %s cluster runs in %s; replacing it", c.Security(), dir)
		case c.ZooKeeperSecurity() != *zookeeperSecurity:
			logf("a cluster with a %s ZooKeeper runs in %s; replacing it", c.ZooKeeperSecurity(), dir)
		case c.KafkaVersion() != *kafkaVersion || c.GivenZooKeeperVersion() != testcluster.ZooKeeperVersionFor(*kafkaVersion, *zookeeperVersion):
			logf("a cluster of Kafka %s and ZooKeeper %s runs in %s; replacing it", c.KafkaVersion(), c.ZooKeeperVersion(), dir)
		case c.ZooKeeperTickTime() != tick:
			logf("a cluster of ZooKeeper tickTime %s runs in %s; replacing it", c.ZooKeeperTickTime(), dir)
		case len(c.KafkaPeers()) != *brokers || len(strings.Split(c.ZookeeperPeers(), ",")) != *zookeepers:
			logf("a cluster of %d ZooKeeper node(s) and %d broker(s) runs in %s; replacing it",
				len(strings.Split(c.ZookeeperPeers(), ",")), len(c.KafkaPeers()), dir)
		default:
			err := c.Healthy(15 * time.Second)
			if err == nil {
				logf("cluster in %s is already up", dir)
				return writeEnv(dir, c)
			}
			logf("cluster in %s is unhealthy (%s); replacing it", dir, firstLine(err.Error()))
		}
		if err := c.Close(); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	zk := *zookeeperVersion
	if zk == "" {
		zk = "the one Kafka brings"
	}
	logf("starting %d ZooKeeper node(s) and %d Kafka broker(s) in %s (Kafka %s in %s mode, ZooKeeper %s, %s, ZooKeeper %s, tickTime %s)",
		*zookeepers, *brokers, dir, *kafkaVersion, *mode, zk, *security, *zookeeperSecurity, tick)
	c, err := testcluster.Start(testcluster.Options{
		ZooKeepers:        *zookeepers,
		Brokers:           *brokers,
		Security:          *security,
		ZooKeeperSecurity: *zookeeperSecurity,
		Dir:               dir,
		Logf:              logf,
		Detached:          true,
		Context:           ctx,
		KafkaVersion:      *kafkaVersion,
		ZooKeeperVersion:  *zookeeperVersion,
		Mode:              *mode,
		ZooKeeperTickTime: tick,
	})
	if err != nil {
		return err
	}
	for _, t := range []struct {
		name       string
		partitions int32
	}{{"test.1", 1}, {"test.4", 4}, {"test.64", 64}} {
		logf("creating topic %s (%d partitions, replication %d)", t.name, t.partitions, *brokers)
		if err := c.CreateTopic(t.name, t.partitions, int16(*brokers)); err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			_ = c.Close()
			return err
		}
	}
	if ctx.Err() != nil {
		_ = c.Close()
		return ctx.Err()
	}
	if err := writeEnv(dir, c); err != nil {
		return err
	}
	logf("cluster up; logs in %s/*/server.log", dir)
	return nil
}

func writeEnv(dir string, c *testcluster.Cluster) error {
	env := fmt.Sprintf("export ZOOKEEPER_PEERS=%s\nexport KAFKA_PEERS=%s\nexport KAFKA_VERSION=%s\n",
		c.ZookeeperPeers(), strings.Join(c.KafkaPeers(), ","), c.KafkaVersion())
	if c.Mode() == testcluster.ModeKRaft {
		env += fmt.Sprintf("export KAFKA_MODE=%s\n", c.Mode())
	}
	if zk := c.GivenZooKeeperVersion(); zk != "" {
		env += fmt.Sprintf("export ZOOKEEPER_VERSION=%s\n", zk)
	}
	if c.Security() != testcluster.SecurityPlaintext {
		ca, err := filepath.Abs(c.CAFile())
		if err != nil {
			return err
		}
		env += fmt.Sprintf("export KAFKA_SECURITY=%s\nexport KAFKA_TLS_CA=%s\nexport KAFKA_SASL_MECHANISM=%s\nexport KAFKA_SASL_USER=%s\nexport KAFKA_SASL_PASSWORD=%s\n",
			c.Security(), ca, testcluster.SASLMechanism, testcluster.SASLUser, c.SASLPassword())
		if c.Security() == testcluster.SecurityMixed {
			env += fmt.Sprintf("export KAFKA_SASL_SSL_PEERS=%s\n", strings.Join(c.SecureKafkaPeers(), ","))
		}
	}
	if c.ZooKeeperSecurity() == testcluster.ZooKeeperSecurityTLS {
		f := c.ZooKeeperTLSFiles()
		env += fmt.Sprintf("export ZOOKEEPER_SECURITY=%s\n", c.ZooKeeperSecurity())
		for _, v := range []struct{ name, path string }{
			{"ZOOKEEPER_TLS_CA", f.CA},
			{"ZOOKEEPER_TLS_CERT", f.Cert},
			{"ZOOKEEPER_TLS_KEY", f.Key},
			{"ZOOKEEPER_TLS_CERT2", f.Cert2},
			{"ZOOKEEPER_TLS_KEY2", f.Key2},
		} {
			abs, err := filepath.Abs(v.path)
			if err != nil {
				return err
			}
			env += fmt.Sprintf("export %s=%s\n", v.name, abs)
		}
	}
	path := filepath.Join(dir, "env")
	if err := os.WriteFile(path+".tmp", []byte(env), 0o644); err != nil {
		return err
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return err
	}
	fmt.Print(env)
	return nil
}

func down(dir string) error {
	c, err := testcluster.Load(dir)
	switch {
	case err == nil:
		c.SetLogf(logf)
		pids := c.Pids()
		if err := c.Close(); err != nil {
			return err
		}
		if err := testcluster.WaitGone(pids, 15*time.Second); err != nil {
			return err
		}
		logf("cluster in %s stopped", dir)
	case errors.Is(err, os.ErrNotExist):
		logf("no cluster state in %s", dir)
	default:
		return err
	}
	return os.RemoveAll(dir)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
