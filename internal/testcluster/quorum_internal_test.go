package testcluster

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// greeting is the first message of a ZooKeeper election connection.
func greeting(version, sid int64, addr string) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(version))
	b = binary.BigEndian.AppendUint64(b, uint64(sid))
	b = binary.BigEndian.AppendUint32(b, uint32(len(addr)))
	return append(b, addr...)
}

func TestElectionGreeting(t *testing.T) {
	t.Parallel()
	const advertised = "127.0.0.1:40001"
	sidOnly := binary.BigEndian.AppendUint64(nil, 3)
	for _, tc := range []struct {
		name    string
		in      []byte
		want    []byte // nil: an error
		wantErr string
	}{
		{"v1", greeting(electionProtocolV1, 2, "127.0.0.1:21001"), greeting(electionProtocolV1, 2, advertised), ""},
		{"v2 with two addresses", greeting(electionProtocolV2, 1, "127.0.0.1:21001|10.0.0.1:21001"), greeting(electionProtocolV2, 1, advertised), ""},
		{"3.4: the sid alone", sidOnly, sidOnly, ""},
		{"unknown version", binary.BigEndian.AppendUint64(nil, uint64(1<<63)), binary.BigEndian.AppendUint64(nil, uint64(1<<63)), ""},
		{"empty address", greeting(electionProtocolV1, 2, ""), nil, "address of 0 bytes"},
		{"cut short", greeting(electionProtocolV1, 2, "127.0.0.1:21001")[:20], nil, "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// What follows the greeting stays unread, for the pumps.
			r := bytes.NewReader(append(tc.in, "rest"...))
			got, err := electionGreeting(advertised)(r)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("greeting = %x, want %x", got, tc.want)
			}
			if rest, _ := io.ReadAll(r); string(rest) != "rest" {
				t.Errorf("left %q unread, want %q", rest, "rest")
			}
		})
	}
}

// An election proxy passes the rewritten greeting, then the rest of the
// stream, and holds the greeting of a new connection while in ProxyHold.
func TestElectionProxy(t *testing.T) {
	t.Parallel()
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	ln, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	p := serveProxy(ln, target.Addr().String(), proxyOptions{greet: electionGreeting("127.0.0.1:40001")})
	defer p.Close()
	p.Hold()
	client, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Write(append(greeting(electionProtocolV1, 2, "127.0.0.1:21001"), "notification"...)); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := target.Accept(); err == nil {
			accepted <- c
		}
	}()
	hold := time.NewTimer(300 * time.Millisecond)
	defer hold.Stop()
	select {
	case c := <-accepted:
		c.Close()
		t.Fatal("the target got a connection while the proxy held it")
	case <-hold.C:
	}
	p.Pass()
	var server net.Conn
	select {
	case server = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("no connection at the target 5 s after Pass")
	}
	defer server.Close()
	want := append(greeting(electionProtocolV1, 2, "127.0.0.1:40001"), "notification"...)
	got := make([]byte, len(want))
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(server, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the target read %q, want %q", got, want)
	}
}

func TestZooKeeperTiming(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tick      time.Duration
		syncLimit int
		want      map[string]string // nil: an error
	}{
		{0, 0, map[string]string{"tickTime": "500", "initLimit": "20", "syncLimit": "10", "minSessionTimeout": "1000", "maxSessionTimeout": "60000"}},
		{2 * time.Second, 5, map[string]string{"tickTime": "2000", "initLimit": "10", "syncLimit": "5", "minSessionTimeout": "4000", "maxSessionTimeout": "60000"}},
		{2 * time.Second, 0, map[string]string{"tickTime": "2000", "initLimit": "20", "syncLimit": "10", "minSessionTimeout": "4000", "maxSessionTimeout": "60000"}},
		{300 * time.Millisecond, 2, map[string]string{"tickTime": "300", "initLimit": "34", "syncLimit": "2", "minSessionTimeout": "600", "maxSessionTimeout": "60000"}},
		{5 * time.Second, 3, map[string]string{"tickTime": "5000", "initLimit": "6", "syncLimit": "3", "minSessionTimeout": "10000", "maxSessionTimeout": "100000"}},
		{-time.Second, 0, nil},
		{1500 * time.Microsecond, 0, nil},
		{0, -1, nil},
	} {
		tick, syncLimit, err := zooKeeperTiming(Options{ZooKeeperTickTime: tc.tick, ZooKeeperSyncLimit: tc.syncLimit})
		if tc.want == nil {
			if err == nil {
				t.Errorf("tick %s, syncLimit %d: no error", tc.tick, tc.syncLimit)
			}
			continue
		}
		if err != nil {
			t.Errorf("tick %s, syncLimit %d: %v", tc.tick, tc.syncLimit, err)
			continue
		}
		got := (&Cluster{zkTick: tick, zkSyncLimit: syncLimit}).timingProps()
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("tick %s, syncLimit %d: %s = %s, want %s", tc.tick, tc.syncLimit, k, got[k], v)
			}
		}
	}
}

// TestZooKeeperTickState: Load gives back the tickTime a detached cluster
// ran with (what `testcluster up` compares with the tick asked for), and
// the default for a state file of before the field.
func TestZooKeeperTickState(t *testing.T) {
	t.Parallel()
	for _, tick := range []time.Duration{0, 2 * time.Second} {
		c := &Cluster{dir: t.TempDir(), detached: true, security: SecurityPlaintext, zkSecurity: ZooKeeperSecurityPlaintext, zkTick: tick}
		c.zks = []*node{{kind: zookeeperNode, id: 1, port: 12181}}
		c.brokers = []*node{{kind: brokerNode, id: 0, port: 19092}}
		if err := c.saveState(); err != nil {
			t.Fatal(err)
		}
		loaded, err := Load(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		want := tick
		if want == 0 { // written as by an older version: no field
			want = defaultZooKeeperTickTime
		}
		if got := loaded.ZooKeeperTickTime(); got != want {
			t.Errorf("saved with tick %s: Load's ZooKeeperTickTime() = %s, want %s", tick, got, want)
		}
		_ = loaded.Close()
	}
}

// Start refuses quorum proxies without an ensemble or with Detached, and
// a timing ZooKeeper cannot run, before it starts anything.
func TestStartQuorumOptions(t *testing.T) {
	t.Parallel()
	for _, opts := range []Options{
		{ZooKeeperQuorumProxies: true},
		{ZooKeepers: 3, ZooKeeperQuorumProxies: true, Detached: true},
		{ZooKeepers: 3, ZooKeeperTickTime: -time.Second},
		{ZooKeepers: 3, ZooKeeperSyncLimit: -1},
	} {
		c, err := Start(opts)
		if err == nil {
			_ = c.Close()
			t.Errorf("Start(%+v) did not fail", opts)
		}
	}
}
