package kafkaconsumer

// ZooKeeper security: the credentials a session presents
// (Config.ZookeeperAuth), the ACL of the group's nodes
// (Config.ZookeeperACL), the check that the instance may do what a member
// of its group does before it registers, and the identities that
// ZooKeeper knows the session by, for the errors that name them.

import (
	"crypto/x509"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZookeeperCredential is a credential that the consumer's ZooKeeper
// session presents with ZooKeeper's addauth (see Config.ZookeeperAuth).
type ZookeeperCredential struct {
	// Scheme is the authentication scheme, such as "digest".
	Scheme string
	// Auth is the scheme's credential: "user:password" for "digest".
	Auth []byte
}

// DigestCredential returns the credential of ZooKeeper's digest scheme for
// user and password: the session is then known as digest:user, which ACLs
// made with zk.DigestACL(perms, user, password) name.
func DigestCredential(user, password string) ZookeeperCredential {
	return ZookeeperCredential{Scheme: "digest", Auth: []byte(user + ":" + password)}
}

// accessProbe begins the name of the node that checkAccess creates and
// deletes in one transaction; ':' is in no Kafka topic name.
const accessProbe = "kafkaconsumer:access-check:"

// validateZookeeperSecurity checks ZookeeperAuth and ZookeeperACL.
func (c *Config) validateZookeeperSecurity() error {
	for i, cred := range c.ZookeeperAuth {
		switch {
		case cred.Scheme == "":
			return fmt.Errorf("%w: ZookeeperAuth[%d] has no Scheme", ErrInvalidConfig, i)
		case len(cred.Auth) == 0:
			return fmt.Errorf("%w: ZookeeperAuth[%d] (scheme %q) has no Auth", ErrInvalidConfig, i, cred.Scheme)
		case cred.Scheme == "digest" && !strings.Contains(string(cred.Auth), ":"):
			return fmt.Errorf("%w: ZookeeperAuth[%d]: a digest credential is \"user:password\" (see DigestCredential)", ErrInvalidConfig, i)
		}
	}
	for i, acl := range c.ZookeeperACL {
		switch {
		case acl.Scheme == "":
			return fmt.Errorf("%w: ZookeeperACL[%d] has no Scheme", ErrInvalidConfig, i)
		case acl.Perms&^zk.PermAll != 0 || acl.Perms == 0:
			return fmt.Errorf("%w: ZookeeperACL[%d] (%s:%s) has permissions %#x; want a non-empty combination of zk.PermRead, PermWrite, PermCreate, PermDelete and PermAdmin",
				ErrInvalidConfig, i, acl.Scheme, acl.ID, acl.Perms)
		case acl.Scheme == "auth" && len(c.ZookeeperAuth) == 0 && c.ZookeeperTLS == nil:
			return fmt.Errorf("%w: ZookeeperACL[%d] has scheme \"auth\" (the session's authenticated identities), but the session has none: set ZookeeperAuth or ZookeeperTLS", ErrInvalidConfig, i)
		}
	}
	return nil
}

// nodeACL returns the ACL that a node the consumer creates gets:
// Config.ZookeeperACL for the group's node and the nodes below it, an
// open one for the parents above it.
func (cm *consumerManager) nodeACL(node string) []zk.ACL {
	acl := cm.config.ZookeeperACL
	group := cm.groupNode()
	if len(acl) == 0 || (node != group && !strings.HasPrefix(node, group+"/")) {
		return zk.WorldACL(zk.PermAll)
	}
	return acl
}

// checkAccess makes sure, before the instance registers, that ZooKeeper
// lets it do in its group what a member does: read ids/ and owners/ (it
// creates both when missing), and create and delete nodes in owners/,
// which it checks with the create and delete of a node in one
// transaction, never seen by anyone. Its registration checks the create
// in ids/ (registered). It returns an error wrapping
// ErrZookeeperAccessDenied that names the node, its ACL and the
// instance's identities when ZooKeeper refuses.
func (cm *consumerManager) checkAccess() error {
	owners := cm.groupNode("owners")
	for _, dir := range []string{cm.groupNode("ids"), owners} {
		// ZooKeeper checks a create's permission before whether the node
		// exists: create only what is missing. (Since 3.5, exists needs
		// the permission to read, too.)
		exists, _, err := cm.zkConn.Exists(dir)
		if err != nil {
			return cm.denied(err, dir, "read "+dir, zk.PermRead)
		}
		if !exists {
			if err := cm.mkdirs(dir); err != nil {
				return cm.denied(err, path.Dir(dir), "create "+dir, zk.PermCreate)
			}
		}
		if _, _, err := cm.zkConn.Get(dir); err != nil {
			return cm.denied(err, dir, "read "+dir, zk.PermRead)
		}
	}
	if acl, _, err := cm.zkConn.GetACL(owners); err == nil && isSealed(acl) {
		return nil // sealed for Kafka's group coordinator: no claim until it opens (owners_seal.go)
	}
	probe := path.Join(owners, accessProbe+cm.instance.ID)
	responses, err := cm.zkConn.Multi(
		&zk.CreateRequest{Path: probe, Acl: cm.nodeACL(probe), Flags: zk.FlagEphemeral},
		&zk.DeleteRequest{Path: probe, Version: -1})
	for _, r := range responses {
		if errors.Is(r.Error, zk.ErrNoAuth) {
			err = r.Error
		}
	}
	if err != nil {
		return cm.denied(err, owners, "claim partitions (create and delete nodes in it)", zk.PermCreate|zk.PermDelete)
	}
	return nil
}

// registrationDenied returns err, the error of the instance's registration, or,
// when it is ZooKeeper's NOAUTH, the error of denied.
func (cm *consumerManager) registrationDenied(err error) error {
	return cm.denied(err, cm.groupNode("ids"), "register (create a node in it)", zk.PermCreate)
}

// denied returns err, or, when it is ZooKeeper's NOAUTH, an error wrapping
// ErrZookeeperAccessDenied that says what was refused on node (doing,
// which needs perms), with node's ACL and the instance's identities.
func (cm *consumerManager) denied(err error, node, doing string, perms int32) error {
	if !errors.Is(err, zk.ErrNoAuth) {
		return err
	}
	acl := "unreadable to this instance"
	if list, _, aerr := cm.zkConn.GetACL(node); aerr == nil {
		acl = describeACL(list)
	} else if !errors.Is(aerr, zk.ErrNoAuth) {
		acl = "unknown (" + aerr.Error() + ")"
	}
	perm := permString(perms)
	return fmt.Errorf("%w: ZooKeeper refused to let this instance %s: that needs permission %s on %s, whose ACL is %s; this instance is %s. Run it with an identity the ACL grants %s (Config.ZookeeperAuth, Config.ZookeeperTLS), or grant %s on the group's nodes to one of its identities (ZooKeeper's setAcl; docs/security.md)",
		ErrZookeeperAccessDenied, doing, perm, node, acl, strings.Join(sessionIdentities(cm.config), ", "), perm, perm)
}

// sessionIdentities returns the identities that ZooKeeper knows a session
// of config by, as scheme:id: world:anyone, the subject of its client
// certificate (x509), and the user of each digest credential (others by
// their scheme alone: their ID is the server's to derive).
func sessionIdentities(config *Config) []string {
	ids := []string{"world:anyone"}
	if config.ZookeeperTLS != nil {
		for _, cert := range config.ZookeeperTLS.Certificates {
			if len(cert.Certificate) == 0 {
				continue
			}
			if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
				ids = append(ids, "x509:"+leaf.Subject.String())
			}
		}
		if config.ZookeeperTLS.GetClientCertificate != nil {
			ids = append(ids, "x509:(the certificate of ZookeeperTLS.GetClientCertificate)")
		}
	}
	for _, cred := range config.ZookeeperAuth {
		if user, _, ok := strings.Cut(string(cred.Auth), ":"); ok && cred.Scheme == "digest" {
			ids = append(ids, "digest:"+user)
		} else {
			ids = append(ids, cred.Scheme+":(its credential)")
		}
	}
	return ids
}

// describeACL writes an ACL as ZooKeeper's getAcl does, one
// scheme:id:perms per entry, with a digest ID's hash left out.
func describeACL(acl []zk.ACL) string {
	if len(acl) == 0 {
		return "empty"
	}
	entries := make([]string, len(acl))
	for i, a := range acl {
		id := a.ID
		if a.Scheme == "digest" {
			id, _, _ = strings.Cut(id, ":")
		}
		entries[i] = a.Scheme + ":" + id + ":" + permString(a.Perms)
	}
	return strings.Join(entries, ", ")
}

// permString writes perms as ZooKeeper's tools do: the letters of cdrwa
// that are granted.
func permString(perms int32) string {
	var b strings.Builder
	for _, p := range []struct {
		perm   int32
		letter byte
	}{{zk.PermCreate, 'c'}, {zk.PermDelete, 'd'}, {zk.PermRead, 'r'}, {zk.PermWrite, 'w'}, {zk.PermAdmin, 'a'}} {
		if perms&p.perm != 0 {
			b.WriteByte(p.letter)
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// authenticate presents the credentials on conn's session, each within
// timeout; go-zookeeper presents them again on every reconnection.
func authenticate(conn *zk.Conn, creds []ZookeeperCredential, timeout time.Duration, servers string) error {
	for _, cred := range creds {
		err := withDeadline(conn, timeout, func() error { return conn.AddAuth(cred.Scheme, cred.Auth) })
		if err != nil {
			return fmt.Errorf("%w: %s refused the credential of scheme %q: %w", ErrZookeeperAccessDenied, servers, cred.Scheme, err)
		}
	}
	return nil
}
