package kafkaconsumer

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestKafkaDialerCutsConnections: cutAll ends a read in flight on a
// connection of the dialer at once, and fails later dials; a connection
// that sarama closes is forgotten.
func TestKafkaDialerCutsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 8)
	done := make(chan struct{})
	go func() { // accepts and never answers, as a hung broker
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		_ = ln.Close()
		<-done
		close(accepted)
		for c := range accepted {
			_ = c.Close()
		}
	}()

	sc := sarama.NewConfig()
	d := useKafkaDialer(sc)
	if !sc.Net.Proxy.Enable || sc.Net.Proxy.Dialer != d {
		t.Fatal("the sarama configuration does not dial through the dialer")
	}
	closed, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	conn, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if n := openConns(d.connSet); n != 1 {
		t.Fatalf("%d connections open; want 1", n)
	}

	read := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 1))
		read <- err
	}()
	d.cutAll()
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("read on a cut connection succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cutAll did not end the read in flight")
	}
	if _, err := d.Dial("tcp", ln.Addr().String()); !errors.Is(err, errDialerClosed) {
		t.Fatalf("dial after cutAll = %v; want %v", err, errDialerClosed)
	}
}

// TestKafkaDialerKeepsTheUsersProxy: a proxy dialer of the user's stays the
// one that dials.
func TestKafkaDialerKeepsTheUsersProxy(t *testing.T) {
	sc := sarama.NewConfig()
	proxy := &countingDialer{}
	sc.Net.Proxy.Enable = true
	sc.Net.Proxy.Dialer = proxy
	d := useKafkaDialer(sc)
	if _, err := d.Dial("tcp", "127.0.0.1:1"); err == nil {
		t.Fatal("the proxy's error was lost")
	}
	if proxy.dials != 1 {
		t.Fatalf("the user's proxy dialed %d times; want 1", proxy.dials)
	}
}

type countingDialer struct{ dials int }

func (c *countingDialer) Dial(network, addr string) (net.Conn, error) {
	c.dials++
	return nil, errors.New("proxy refused")
}

// openConns returns how many connections of s are open.
func openConns(s *connSet) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
