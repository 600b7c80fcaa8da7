package main

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// checkLeaks fails the test if goroutines that it started are still
// running at its very end (after its other cleanups), once goleak's
// retries are over.
func checkLeaks(t *testing.T) {
	t.Helper()
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		// sarama's metrics library runs one goroutine per process.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

func TestRunUsageErrors(t *testing.T) {
	t.Setenv("ZOOKEEPER_PEERS", "") // the default of --zookeeper
	t.Setenv("KAFKA_SASL_PASSWORD", "")
	for _, name := range []string{"ZOOKEEPER_DIGEST_PASSWORD", "ZOOKEEPER_TLS_CA", "ZOOKEEPER_TLS_CERT", "ZOOKEEPER_TLS_KEY"} {
		t.Setenv(name, "")
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no zookeeper", []string{"--group", "g"}, "--zookeeper is required (or set ZOOKEEPER_PEERS), or --bootstrap-server"},
		{"no group", []string{"--zookeeper", "zk:2181"}, "--group NAME is required"},
		{"list and group", []string{"--zookeeper", "zk:2181", "--list", "--group", "g"}, "either --list or --group"},
		{"argument", []string{"--zookeeper", "zk:2181", "--group", "g", "extra"}, `unexpected argument "extra"`},
		{"bad timeout", []string{"--zookeeper", "zk:2181", "--group", "g", "--timeout", "0s"}, "--timeout must be positive"},
		{"bad port", []string{"--zookeeper", "zk:99999", "--group", "g"}, "invalid port"},
		{"bad chroot", []string{"--zookeeper", "zk:2181/a//b", "--group", "g"}, "empty chroot path element"},
		{"unknown flag", []string{"--zookeeper", "zk:2181", "--bogus"}, "flag provided but not defined: -bogus"},
		{"bad duration", []string{"--zookeeper", "zk:2181", "--group", "g", "--timeout", "soon"}, "invalid value"},
		{"SASL without user", []string{"--zookeeper", "zk:2181", "--group", "g", "--sasl-mechanism", "SCRAM-SHA-512"}, "--sasl-mechanism needs --sasl-user"},
		{"SASL without password", []string{"--zookeeper", "zk:2181", "--group", "g", "--sasl-mechanism", "plain", "--sasl-user", "u"}, "$KAFKA_SASL_PASSWORD"},
		{"unknown SASL mechanism", []string{"--zookeeper", "zk:2181", "--group", "g", "--sasl-mechanism", "GSSAPI", "--sasl-user", "u"}, "want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"},
		{"SASL user alone", []string{"--zookeeper", "zk:2181", "--group", "g", "--sasl-user", "u"}, "--sasl-user needs --sasl-mechanism"},
		{"certificate without key", []string{"--zookeeper", "zk:2181", "--group", "g", "--tls-cert", "c.pem"}, "both --tls-cert and --tls-key"},
		{"missing CA file", []string{"--zookeeper", "zk:2181", "--group", "g", "--tls-ca", "/nonexistent/ca.pem"}, "--tls-ca"},
		{"ZooKeeper certificate without key", []string{"--zookeeper", "zk:2181", "--group", "g", "--zookeeper-tls-cert", "c.pem"}, "both --zookeeper-tls-cert and --zookeeper-tls-key"},
		{"missing ZooKeeper CA file", []string{"--zookeeper", "zk:2181", "--group", "g", "--zookeeper-tls-ca", "/nonexistent/ca.pem"}, "--zookeeper-tls-ca"},
		{"digest user without password", []string{"--zookeeper", "zk:2181", "--group", "g", "--zookeeper-digest-user", "u"}, "$ZOOKEEPER_DIGEST_PASSWORD"},
		{"bootstrap and listener", []string{"--zookeeper", "zk:2181", "--group", "g", "--bootstrap-server", "k:9092", "--listener", "EXTERNAL"}, "either --bootstrap-server or --listener"},
		{"bad bootstrap", []string{"--zookeeper", "zk:2181", "--group", "g", "--bootstrap-server", "k:9092,k2"}, `"k2" is not host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != exitUsage {
				t.Errorf("exit status %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr.String())
			}
			if stdout.Len() > 0 {
				t.Errorf("unexpected output: %s", stdout.String())
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &stderr); code != exitOK {
		t.Errorf("exit status %d, want %d", code, exitOK)
	}
	for _, want := range []string{"Usage:", "--list", "-timeout"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, stderr.String())
		}
	}
}

func TestDescribeGroupInvalidName(t *testing.T) {
	t.Parallel()
	for _, group := range []string{"", "a/b", ".."} {
		if _, err := describeGroup("127.0.0.1:2181", zookeeperAccess{}, group, time.Second, kafkaAccess{}); err == nil || !strings.Contains(err.Error(), "invalid group name") {
			t.Errorf("group %q: got error %v, want invalid group name", group, err)
		}
	}
}

// blackHole is a TCP server that accepts connections and never answers,
// like a ZooKeeper server that hangs; it is closed at the end of the test.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() { // ends when the listener is closed
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, conn := range conns {
			conn.Close()
		}
	})
	return ln.Addr().String()
}

// TestRunZookeeperUnresponsive checks that the tool gives up after
// --timeout when ZooKeeper does not answer (refuses connections, or
// accepts them and says nothing), instead of waiting forever.
func TestRunZookeeperUnresponsive(t *testing.T) {
	t.Parallel()
	refused := func() string { // a port nobody listens on
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}()
	for _, tc := range []struct{ name, zookeeper string }{
		{"refused", refused},
		{"silent", blackHole(t)},
		{"silent with chroot", blackHole(t) + "/kafka"},
	} {
		for _, mode := range [][]string{{"--group", "g"}, {"--list"}} {
			t.Run(tc.name+" "+mode[0], func(t *testing.T) {
				t.Parallel()
				var stdout, stderr bytes.Buffer
				start := time.Now()
				code := run(append([]string{"--zookeeper", tc.zookeeper, "--timeout", "300ms"}, mode...), &stdout, &stderr)
				elapsed := time.Since(start)
				if code != exitError {
					t.Errorf("exit status %d, want %d", code, exitError)
				}
				if !strings.Contains(stderr.String(), "timed out") || !strings.Contains(stderr.String(), tc.zookeeper) {
					t.Errorf("stderr does not say it timed out on %s:\n%s", tc.zookeeper, stderr.String())
				}
				// 300 ms, plus up to 1 s that the ZooKeeper client waits
				// for its close request when no server answers.
				if elapsed > 3*time.Second {
					t.Errorf("took %s with --timeout 300ms", elapsed)
				}
			})
		}
	}
}

func TestDescribeGroupTimeoutError(t *testing.T) {
	checkLeaks(t) // not parallel: goleak sees every goroutine
	_, err := describeGroup(blackHole(t), zookeeperAccess{}, "g", 200*time.Millisecond, kafkaAccess{})
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("got %v, want an error wrapping ErrTimeout", err)
	}
	_, err = listGroups(blackHole(t), zookeeperAccess{}, 200*time.Millisecond, kafkaAccess{})
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("got %v, want an error wrapping ErrTimeout", err)
	}
}

// TestDescribeKafkaTimeoutError: with --bootstrap-server alone, a Kafka
// that accepts connections and never answers makes the tool give up
// after its timeout, for a description and for the list.
func TestDescribeKafkaTimeoutError(t *testing.T) {
	checkLeaks(t) // not parallel: goleak sees every goroutine
	access := kafkaAccess{bootstrap: []string{blackHole(t)}}
	began := time.Now()
	_, err := describeGroup("", zookeeperAccess{}, "g", 300*time.Millisecond, access)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("describe: got %v, want an error wrapping ErrTimeout", err)
	}
	_, err = listGroups("", zookeeperAccess{}, 300*time.Millisecond, access)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("list: got %v, want an error wrapping ErrTimeout", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("took %s with a timeout of 300ms each", took)
	}
}
