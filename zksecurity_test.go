package kafkaconsumer

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// The identities of the digest tests: the group's, and an intruder's.
var (
	digestGroup    = DigestCredential("group-a", "secret-a")
	digestIntruder = DigestCredential("group-b", "secret-b")
	digestGroupACL = zk.DigestACL(zk.PermAll, "group-a", "secret-a")
)

// digestConfig is testConfig with the group's digest credential, and its
// ACL on the nodes the instance creates when locked.
func digestConfig(locked bool) *Config {
	config := testConfig()
	config.ZookeeperAuth = []ZookeeperCredential{digestGroup}
	if locked {
		config.ZookeeperACL = digestGroupACL
	}
	return config
}

// testZookeeperAs is testZookeeper with the credentials creds presented
// on the session.
func testZookeeperAs(t testing.TB, creds ...ZookeeperCredential) (*zk.Conn, string) {
	t.Helper()
	conn, chroot := testZookeeper(t, zookeeperPeers)
	for _, cred := range creds {
		if err := conn.AddAuth(cred.Scheme, cred.Auth); err != nil {
			t.Fatalf("AddAuth(%s): %v", cred.Scheme, err)
		}
	}
	return conn, chroot
}

// groupNodes returns the group's nodes, read on conn: the group's node,
// ids/, owners/ and owners/<topic> (persistent), then the registrations
// and the claims of topic (ephemeral).
func groupNodes(t testing.TB, conn *zk.Conn, chroot, group, topic string) (persistent, ephemeral []string) {
	t.Helper()
	base := path.Join(chroot, "/consumers", group)
	persistent = []string{base, base + "/ids", base + "/owners", base + "/owners/" + topic}
	for _, dir := range []string{base + "/ids", base + "/owners/" + topic} {
		children, _, err := conn.Children(dir)
		if err != nil {
			t.Fatalf("list %s: %v", dir, err)
		}
		for _, c := range children {
			ephemeral = append(ephemeral, dir+"/"+c)
		}
	}
	return persistent, ephemeral
}

// checkACL checks that each of nodes has the ACL want, read on conn.
func checkACL(t *testing.T, conn *zk.Conn, nodes []string, want []zk.ACL) {
	t.Helper()
	for _, node := range nodes {
		acl, _, err := conn.GetACL(node)
		if err != nil {
			t.Fatalf("GetACL(%s): %v", node, err)
		}
		if !sameACL(acl, want) {
			t.Errorf("%s has ACL %s, want %s", node, describeACL(acl), describeACL(want))
		}
	}
}

// checkLockedOut checks that each session of intruders (by the identity
// it is known by) can delete none of the group's claims, register in none
// of its nodes, and change none of them or its claims: ZooKeeper answers
// NOAUTH.
func checkLockedOut(t *testing.T, nodes []string, claims []string, intruders map[string]*zk.Conn) {
	t.Helper()
	for who, conn := range intruders {
		for _, claim := range claims {
			if err := conn.Delete(claim, -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s deleted claim %s: %v, want NOAUTH", who, claim, err)
			}
			if _, err := conn.Set(claim, []byte("intruder"), -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s changed claim %s: %v, want NOAUTH", who, claim, err)
			}
		}
		for _, node := range nodes {
			if _, err := conn.Create(node+"/intruder", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s created a node in %s: %v, want NOAUTH", who, node, err)
			}
			if _, err := conn.Set(node, []byte("intruder"), -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s changed %s: %v, want NOAUTH", who, node, err)
			}
		}
	}
}

// checkJoinDenied checks that an instance with config joining group
// through the ZooKeeper of connection string zookeeper fails within a
// bound with ErrZookeeperAccessDenied naming identity, and registers
// nothing (conn sees the group's registrations).
func checkJoinDenied(t *testing.T, zookeeper, group, topic string, config *Config, identity string, conn *zk.Conn, chroot string) {
	t.Helper()
	ids := path.Join(chroot, "/consumers", group, "ids")
	before, _, err := conn.Children(ids)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c, err := Join(group, TopicSubscription(topic), zookeeper, config)
	took := time.Since(began)
	if err == nil {
		_ = c.Close()
		t.Fatalf("Join as %s = nil, want ErrZookeeperAccessDenied", identity)
	}
	if !errors.Is(err, ErrZookeeperAccessDenied) {
		t.Fatalf("Join as %s = %v, want ErrZookeeperAccessDenied", identity, err)
	}
	for _, want := range []string{identity, "/consumers/" + group, "permission "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Join's error does not say %q: %v", want, err)
		}
	}
	t.Logf("Join as %s failed in %s: %v", identity, took.Round(time.Millisecond), err)
	if bound := 2 * config.Zookeeper.Timeout; took > bound {
		t.Errorf("Join as %s took %s to fail, want at most %s", identity, took, bound)
	}
	after, _, err := conn.Children(ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("the denied Join left the registrations %v (before %v)", after, before)
	}
}

// TestZookeeperDigestACL: a group whose instances present digest
// credentials and give their nodes a digest ACL consumes and commits; every
// node it created has the ACL; another identity, or none, can delete none
// of its claims, register in none of its nodes and change none of them,
// and an instance of either fails Join with a clear error, registering
// nothing.
func TestZookeeperDigestACL(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	client := newTestClient(t)
	group := uniqueName("acl.digest")
	start := startGroupAt(t, client, group, topic)

	c := join(t, group, TopicSubscription(topic), digestConfig(true))
	col := collect(c, nil)
	values := produce(t, client, topic, group, 100)
	waitFor(t, 30*time.Second, "100 messages", func() bool { return col.has(values) })
	waitFor(t, 30*time.Second, "4 claimed partitions", func() bool { return len(c.Stats()) == 4 })

	conn, chroot := testZookeeperAs(t, digestGroup)
	persistent, ephemeral := groupNodes(t, conn, chroot, group, topic)
	if len(ephemeral) != 5 {
		t.Fatalf("the group's ephemeral nodes are %v, want a registration and 4 claims", ephemeral)
	}
	checkACL(t, conn, append(persistent, ephemeral...), digestGroupACL)
	intruderConn, _ := testZookeeperAs(t, digestIntruder)
	anonymous, _ := testZookeeperAs(t)
	checkLockedOut(t, persistent, ephemeral[1:], map[string]*zk.Conn{"digest:group-b": intruderConn, "world:anyone": anonymous})

	intruder := testConfig()
	intruder.ZookeeperAuth = []ZookeeperCredential{digestIntruder}
	checkJoinDenied(t, zookeeperPeers, group, topic, intruder, "digest:group-b", conn, chroot)
	checkJoinDenied(t, zookeeperPeers, group, topic, testConfig(), "world:anyone", conn, chroot)

	col.close(t)
	checkCommitted(t, client, group, start, map[string]int{topic: 100})
	checkDeregisteredOn(t, conn, chroot, group, c)
}

// TestZookeeperACLRollingUpgrade moves a running group onto an ACL in the
// order docs/security.md gives, while messages flow: the instances
// present credentials already; each restarts with ZookeeperACL; then the
// group's persistent nodes get the ACL with setAcl. Nothing is lost, and
// the group is locked: an instance without the credentials fails Join.
func TestZookeeperACLRollingUpgrade(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	client := newTestClient(t)
	group := uniqueName("acl.upgrade")
	start := startGroupAt(t, client, group, topic)

	open, locked := digestConfig(false), digestConfig(true)

	// 1. The group runs with credentials and open nodes.
	cols := []*collector{collect(join(t, group, TopicSubscription(topic), open), nil), collect(join(t, group, TopicSubscription(topic), open), nil)}
	every := append([]*collector(nil), cols...) // the closed ones too
	values := produce(t, client, topic, group+".open", 50)

	// 2. One instance at a time restarts with ZookeeperACL.
	for i := range cols {
		cols[i].close(t)
		cols[i] = collect(join(t, group, TopicSubscription(topic), locked), nil)
		every = append(every, cols[i])
		values = append(values, produce(t, client, topic, fmt.Sprintf("%s.restarted%d", group, i), 50)...)
	}

	// 3. The persistent nodes get the ACL.
	conn, chroot := testZookeeperAs(t, digestGroup)
	waitFor(t, 30*time.Second, "every partition claimed", func() bool {
		_, ephemeral := groupNodes(t, conn, chroot, group, topic)
		return len(ephemeral) == 6
	})
	persistent, ephemeral := groupNodes(t, conn, chroot, group, topic)
	for _, node := range persistent {
		if _, err := conn.SetACL(node, digestGroupACL, -1); err != nil {
			t.Fatalf("SetACL(%s): %v", node, err)
		}
	}
	values = append(values, produce(t, client, topic, group+".3", 50)...)

	var claims []string
	for _, node := range ephemeral {
		if strings.Contains(node, "/owners/") {
			claims = append(claims, node)
		}
	}
	anonymous, _ := testZookeeperAs(t)
	checkLockedOut(t, persistent, claims, map[string]*zk.Conn{"world:anyone": anonymous})
	checkJoinDenied(t, zookeeperPeers, group, topic, testConfig(), "world:anyone", conn, chroot)

	waitFor(t, 30*time.Second, "every message", func() bool {
		all, _ := union(values, every...)
		return all
	})
	for _, col := range cols {
		col.close(t)
	}
	checkCommitted(t, client, group, start, map[string]int{topic: len(values)})
}
