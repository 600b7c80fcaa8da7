package zktls

import (
	"crypto/tls"
	"testing"
)

// TestNamedHosts: the servers by their names, in turn, retryStart once
// every server was tried since the last connection.
func TestNamedHosts(t *testing.T) {
	t.Parallel()
	h := &NamedHosts{}
	if err := h.Init([]string{"zk1.example:2182", "zk2.example:2182"}); err != nil {
		t.Fatal(err)
	}
	type next struct {
		server string
		retry  bool
	}
	var got []next
	for range 4 {
		s, retry := h.Next()
		got = append(got, next{s, retry})
	}
	want := []next{{"zk1.example:2182", false}, {"zk2.example:2182", false}, {"zk1.example:2182", true}, {"zk2.example:2182", false}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Next() calls gave %v, want %v", got, want)
		}
	}
	h.Connected() // to zk2
	if s, retry := h.Next(); s != "zk1.example:2182" || retry {
		t.Errorf("after connecting to zk2, Next() = %s, %v; want zk1, false", s, retry)
	}
	if s, retry := h.Next(); s != "zk2.example:2182" || !retry {
		t.Errorf("then Next() = %s, %v; want zk2, true", s, retry)
	}
	if err := (&NamedHosts{}).Init(nil); err == nil {
		t.Error("Init(nil) = nil, want an error")
	}
}

func TestForServer(t *testing.T) {
	t.Parallel()
	base := &tls.Config{}
	if got := ForServer(base, "zk1.example:2182").ServerName; got != "zk1.example" {
		t.Errorf("ServerName = %q, want zk1.example", got)
	}
	if base.ServerName != "" {
		t.Error("ForServer changed its argument")
	}
	if got := ForServer(&tls.Config{ServerName: "zk"}, "10.0.0.1:2182").ServerName; got != "zk" {
		t.Errorf("ServerName = %q, want the one set, zk", got)
	}
}
