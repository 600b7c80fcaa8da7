// Package testcluster runs a real, local, ZooKeeper-mode Kafka cluster for
// tests: ZooKeeper nodes and Kafka brokers as JVM child processes on free
// 127.0.0.1 ports, built from the Kafka jars that Maven Central serves
// (see EnsureKafkaJars).
//
// Options.Mode ModeKRaft runs KRaft brokers instead (each a combined
// broker and controller, from the same jars; Kafka 4 runs only so), next
// to a stand-alone ZooKeeper that only consumer groups use.
//
// Options.KafkaVersion picks the Kafka release (default DefaultKafkaVersion,
// 3.9.1); Options.ZooKeeperVersion runs the ZooKeeper nodes from a
// ZooKeeper release's own jars (EnsureZooKeeperJars) instead of the server
// the Kafka release brings. The JVMs run on a Java that fits both
// (JAVA_HOME, java on PATH, or the newest fitting one in /usr/lib/jvm);
// Start says which, or fails naming what would fit. VersionsFromEnv reads
// $KAFKA_VERSION and $ZOOKEEPER_VERSION.
//
// A typical test:
//
//	c, err := testcluster.Start(testcluster.Options{Logf: t.Logf})
//	if err != nil {
//		t.Fatal(err)
//	}
//	defer c.Close()
//	if err := c.CreateTopic("events", 4, 1); err != nil {
//		t.Fatal(err)
//	}
//	// connect to c.ZookeeperPeers() / c.KafkaPeers()
//
// Options.Security starts a secured cluster instead: SecuritySASLSSL (the
// only listener SASL_SSL with SCRAM-SHA-512, between the brokers too) or
// SecurityMixed (PLAINTEXT and a SASL_SSL listener named EXTERNAL). The CA
// and broker certificate are made at start as PEM files (CAFile), and the
// SCRAM user SASLUser (password SASLPassword) is written to ZooKeeper
// before the brokers start; SecureConfig sets a sarama configuration up
// for the SASL_SSL listener (SecureKafkaPeers). ModeKRaft runs with
// SecurityMixed too: the SCRAM credentials (SHA-512 and SHA-256) go into
// the metadata log when the storage is formatted, and the EXTERNAL
// listener also takes PLAIN and OAUTHBEARER (Kafka's unsecured tokens);
// SASLConfig sets a client up for each of KRaftSASLMechanisms.
//
// Options.ZooKeeperSASL, with any Security, starts ZooKeeper with SASL
// (DIGEST-MD5) enabled but not enforced, and brokers that log in to it as
// ZooKeeperSASLUser and create their nodes with ACLs
// (zookeeper.set.acl=true).
//
// Options.ZooKeeperSecurity ZooKeeperSecurityTLS runs ZooKeeper with a TLS
// client port only, which requires a client certificate signed by the
// cluster's CA and names each session by its certificate's subject (x509
// ACLs); the brokers and the harness connect over TLS too. The client
// certificates of two identities are made at start (ZooKeeperTLSFiles);
// ZooKeeperDialer connects go-zookeeper as the first:
//
//	c, err := testcluster.Start(testcluster.Options{ZooKeeperSecurity: testcluster.ZooKeeperSecurityTLS})
//	...
//	conn, _, err := zk.Connect(strings.Split(c.ZookeeperPeers(), ","), 10*time.Second, zk.WithDialer(c.ZooKeeperDialer()))
//
// Options.ZooKeeperTickTime and ZooKeeperSyncLimit set the ensemble's
// timing (default 500 ms and 10 ticks; production ensembles run about
// 2 s and 5); the tick also sets minSessionTimeout (2 ticks), and ZooKeeper
// expires a session up to a tick after its timeout. A detached cluster
// keeps its tick in its state (ZooKeeperTickTime after Load); the
// testcluster command takes it as -zookeeper-tick-ms or
// $ZOOKEEPER_TICK_MS (make cluster-up ZOOKEEPER_TICK_MS=2000). Options.ZooKeeperQuorumProxies puts a Proxy on every way
// from one ZooKeeper node to another's quorum and election ports, so that
// a test can cut one node off from the quorum while its clients still
// reach it:
//
//	c, err := testcluster.Start(testcluster.Options{ZooKeepers: 3, ZooKeeperQuorumProxies: true})
//	...
//	if err := c.CutZooKeeperFromQuorum(i); err != nil { // node i still serves reads, for now
//		t.Fatal(err)
//	}
//	// syncLimit × tickTime later it stops serving (ZooKeeperMode fails
//	// with ErrZooKeeperNotServing); if it led, the others elect another
//	if err := c.RestoreZooKeeperQuorum(i); err != nil {
//		t.Fatal(err)
//	}
//
// Child JVMs of a non-detached cluster die with the process that started
// them (Linux: PR_SET_PDEATHSIG), even when a test binary is killed. A
// detached cluster (Options.Detached) outlives its starter; its state is
// kept in Dir/state.json so that Load can find it again (this is what
// `make cluster-up` / `make cluster-down` use).
package testcluster
