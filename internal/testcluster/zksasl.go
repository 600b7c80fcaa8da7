package testcluster

// ZooKeeper with SASL (Options.ZooKeeperSASL): the ZooKeeper nodes accept
// SASL DIGEST-MD5 logins (a JAAS Server section with ZooKeeper's
// DigestLoginModule) without requiring them, and the brokers log in as
// ZooKeeperSASLUser (a JAAS Client section) and put ACLs on the nodes
// they create (zookeeper.set.acl=true).

import (
	"fmt"
	"os"
	"path/filepath"
)

// ZooKeeperSASLUser is the user the brokers log in to ZooKeeper as when
// Options.ZooKeeperSASL is set; ZooKeeper gives the nodes they create the
// ACL sasl:<ZooKeeperSASLUser>.
const ZooKeeperSASLUser = "kafka"

// jaasFile is the JAAS login configuration of a node of a cluster with
// ZooKeeper SASL, in its directory.
func (n *node) jaasFile() string { return filepath.Join(n.dir, "jaas.conf") }

// jaasString quotes s for a JAAS configuration file.
func jaasString(s string) string { return fmt.Sprintf("%q", s) }

// writeZooKeeperSASL adds to props the SASL settings of a ZooKeeper node
// and writes its JAAS file (a Server section knowing ZooKeeperSASLUser).
// Unless zkRequired, nothing requires clients to log in:
// enforce.auth.enabled and sessionRequireClientSASLAuth keep their
// default, false.
func (c *Cluster) writeZooKeeperSASL(n *node, props map[string]string) error {
	// Unknown keys of zoo.cfg become zookeeper.* system properties:
	// zookeeper.authProvider.1, zookeeper.enforce.auth.enabled, …
	props["authProvider.1"] = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
	if c.zkRequired {
		props["enforce.auth.enabled"] = "true"
		props["enforce.auth.schemes"] = "sasl"
	}
	jaas := fmt.Sprintf("Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  user_%s=%s;\n};\n",
		ZooKeeperSASLUser, jaasString(c.zkPassword))
	return os.WriteFile(n.jaasFile(), []byte(jaas), 0o600)
}

// writeBrokerZooKeeperSASL adds to props the ZooKeeper ACL setting of a
// broker and writes its JAAS file (a Client section: the broker's login to
// ZooKeeper).
func (c *Cluster) writeBrokerZooKeeperSASL(n *node, props map[string]string) error {
	props["zookeeper.set.acl"] = "true"
	jaas := fmt.Sprintf("Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  username=%s\n  password=%s;\n};\n",
		jaasString(ZooKeeperSASLUser), jaasString(c.zkPassword))
	return os.WriteFile(n.jaasFile(), []byte(jaas), 0o600)
}

// ZooKeeperSASL reports whether ZooKeeper has SASL enabled
// (Options.ZooKeeperSASL or ZooKeeperSASLRequired).
func (c *Cluster) ZooKeeperSASL() bool { return c.zkSASL }

// ZooKeeperSASLRequired reports whether the cluster was started with
// Options.ZooKeeperSASLRequired.
func (c *Cluster) ZooKeeperSASLRequired() bool { return c.zkRequired }

// ZooKeeperSASLPassword returns the ZooKeeper password of
// ZooKeeperSASLUser; "" without Options.ZooKeeperSASL.
func (c *Cluster) ZooKeeperSASLPassword() string { return c.zkPassword }
