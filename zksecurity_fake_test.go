package kafkaconsumer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

func TestValidateZookeeperSecurity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" for valid
	}{
		{"digest", func(c *Config) {
			c.ZookeeperAuth = []ZookeeperCredential{DigestCredential("a", "b")}
			c.ZookeeperACL = zk.DigestACL(zk.PermAll, "a", "b")
		}, ""},
		{"auth scheme with credentials", func(c *Config) {
			c.ZookeeperAuth = []ZookeeperCredential{DigestCredential("a", "b")}
			c.ZookeeperACL = zk.AuthACL(zk.PermAll)
		}, ""},
		{"x509 ACL", func(c *Config) {
			c.ZookeeperTLS = &tls.Config{}
			c.ZookeeperACL = []zk.ACL{{Perms: zk.PermAll, Scheme: "x509", ID: "CN=a"}}
		}, ""},
		{"credential without scheme", func(c *Config) { c.ZookeeperAuth = []ZookeeperCredential{{Auth: []byte("a:b")}} }, "ZookeeperAuth[0] has no Scheme"},
		{"credential without auth", func(c *Config) { c.ZookeeperAuth = []ZookeeperCredential{{Scheme: "digest"}} }, "has no Auth"},
		{"digest without password", func(c *Config) {
			c.ZookeeperAuth = []ZookeeperCredential{{Scheme: "digest", Auth: []byte("a")}}
		}, "\"user:password\""},
		{"ACL without scheme", func(c *Config) { c.ZookeeperACL = []zk.ACL{{Perms: zk.PermAll, ID: "x"}} }, "ZookeeperACL[0] has no Scheme"},
		{"ACL without permissions", func(c *Config) { c.ZookeeperACL = []zk.ACL{{Scheme: "world", ID: "anyone"}} }, "has permissions 0x0"},
		{"ACL with unknown permissions", func(c *Config) { c.ZookeeperACL = []zk.ACL{{Perms: 64, Scheme: "world", ID: "anyone"}} }, "has permissions 0x40"},
		{"auth scheme without credentials", func(c *Config) { c.ZookeeperACL = zk.AuthACL(zk.PermAll) }, "the session has none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := NewConfig()
			tc.set(config)
			err := config.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig with %q", err, tc.want)
			}
		})
	}
}

// TestNodeACL: the group's node and the nodes below it get ZookeeperACL;
// the parents above it, shared with other groups, stay open.
func TestNodeACL(t *testing.T) {
	t.Parallel()
	cm, _ := fakeSessionManager(t)
	open := zk.WorldACL(zk.PermAll)
	if got := cm.nodeACL("/consumers/g/ids/me"); !sameACL(got, open) {
		t.Errorf("without ZookeeperACL, a registration's ACL is %v, want %v", got, open)
	}
	acl := zk.DigestACL(zk.PermAll, "a", "b")
	cm.config.ZookeeperACL = acl
	for node, want := range map[string][]zk.ACL{
		"/consumers":             open,
		"/consumers/g":           acl,
		"/consumers/g/ids/me":    acl,
		"/consumers/g/owners":    acl,
		"/consumers/g/owners/t":  acl,
		"/consumers/g2":          open,
		"/consumers/g2/ids/x":    open,
		"/consumers/g/owners/t/": acl,
	} {
		if got := cm.nodeACL(node); !sameACL(got, want) {
			t.Errorf("nodeACL(%s) = %v, want %v", node, got, want)
		}
	}
}

func sameACL(a, b []zk.ACL) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCheckAccessDenied: a NOAUTH on any step of the check before the
// registration is an ErrZookeeperAccessDenied that names the node, the
// permission and the instance's identities; the registration is not
// attempted.
func TestCheckAccessDenied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		op, node, perm string
		exist          []string // the nodes there before
	}{
		{"Create", "/consumers/g", "permission c on", []string{"/consumers/g"}},
		{"Exists", "/consumers/g/ids", "permission r on", []string{"/consumers/g", "/consumers/g/ids"}},
		{"Get", "/consumers/g/ids", "permission r on", []string{"/consumers/g"}},
		{"Multi", "/consumers/g/owners", "permission cd on", []string{"/consumers/g"}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			cm, fake := fakeSessionManager(t)
			cm.config.ZookeeperAuth = []ZookeeperCredential{DigestCredential("group-b", "secret")}
			for _, node := range tc.exist {
				fake.put(node, nil, 0)
			}
			fake.failNext(tc.op, zk.ErrNoAuth)
			err := cm.checkAccess()
			if !errors.Is(err, ErrZookeeperAccessDenied) {
				t.Fatalf("checkAccess() = %v, want ErrZookeeperAccessDenied", err)
			}
			for _, want := range []string{tc.perm + " " + tc.node + ",", "world:anyone", "digest:group-b", "world:anyone:cdrwa"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, err)
				}
			}
			if _, ok := fake.get("/consumers/g/ids/me"); ok {
				t.Error("the instance registered")
			}
		})
	}
}

// TestCheckAccessLeavesNothing: the check's probe of owners/ is created
// and deleted in one transaction.
func TestCheckAccessLeavesNothing(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	if err := cm.checkAccess(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/consumers/g/ids", "/consumers/g/owners"} {
		if _, ok := fake.get(dir); !ok {
			t.Errorf("%s was not created", dir)
		}
	}
	if children := fake.nodes.children("/consumers/g/owners"); len(children) != 0 {
		t.Errorf("owners/ holds %v after the check", children)
	}
	wantCalls(t, fake, "Multi", 1, "one transaction for the create and delete in owners/")
}

func TestPermString(t *testing.T) {
	t.Parallel()
	for perms, want := range map[int32]string{
		zk.PermAll:                    "cdrwa",
		zk.PermRead:                   "r",
		zk.PermCreate | zk.PermDelete: "cd",
		0:                             "none",
	} {
		if got := permString(perms); got != want {
			t.Errorf("permString(%#x) = %q, want %q", perms, got, want)
		}
	}
}

// TestDescribeACL: a digest ID's hash is left out of errors.
func TestDescribeACL(t *testing.T) {
	t.Parallel()
	acl := append(zk.DigestACL(zk.PermAll, "group-a", "secret"), zk.ACL{Perms: zk.PermRead, Scheme: "x509", ID: "CN=reader"})
	got := describeACL(acl)
	if want := "digest:group-a:cdrwa, x509:CN=reader:r"; got != want {
		t.Errorf("describeACL = %q, want %q", got, want)
	}
}

// TestSessionIdentities: the identities ZooKeeper knows a session by, as
// the errors name them.
func TestSessionIdentities(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "orders", Organization: []string{"shop"}},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	config := NewConfig()
	config.ZookeeperTLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	config.ZookeeperAuth = []ZookeeperCredential{DigestCredential("group-a", "secret"), {Scheme: "custom", Auth: []byte("token")}}
	got := strings.Join(sessionIdentities(config), ", ")
	if want := "world:anyone, x509:CN=orders,O=shop, digest:group-a, custom:(its credential)"; got != want {
		t.Errorf("sessionIdentities = %q, want %q", got, want)
	}
}
