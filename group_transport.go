package kafkaconsumer

// The group transport: the requests of the consumer group protocol
// (KIP-848), which sarama cannot send (ConsumerGroupHeartbeat, key 68, is
// a placeholder there, and its OffsetCommit stops at version 8, before
// the member epoch), encoded with franz-go's protocol library kmsg and
// sent on franz-go's kgo client used as a transport only: no consuming,
// no group management of its own. kgo brings what a connection needs
// (ApiVersions, SASL handshake and reauthentication, request framing,
// version negotiation); every connection it opens is dialed here, through
// the consumer's own kafkaDialer, so that Net.Proxy is honoured exactly
// as on the sarama side and Close cuts the connections, and TLS is the
// user's Net.TLS.Config as sarama applies it (validServerName). SASL is
// franz-go's maintained PLAIN, SCRAM and OAUTHBEARER mapped from
// sarama's Net.SASL; no second hand-written SASL.
//
// The group's coordinator is looked up here (FindCoordinator to any
// broker) and kept until a request to it fails or it answers that it is
// not the coordinator: kgo's own routing of ConsumerGroupHeartbeat keeps
// a stale coordinator after NOT_COORDINATOR, and the member must be able
// to move on at the next heartbeat. Other members of the root package
// (the groups tool's describe, the move between protocols) call
// coordinatorRequest and request.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// groupTransport sends the requests of one group with kgo over the
// consumer's dialer. Safe for use by many goroutines.
type groupTransport struct {
	cl      *kgo.Client
	group   string
	timeout time.Duration // the bound of one request: Net.ReadTimeout

	mu          sync.Mutex  // guards coordinator
	coordinator *kgo.Broker // the group's coordinator; nil until looked up, and after a failure
}

// consumerProtocolSASL reports whether the group transport supports the
// sarama SASL mechanism m.
func consumerProtocolSASL(m sarama.SASLMechanism) bool {
	switch m {
	case "", sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512, sarama.SASLTypeOAuth:
		return true
	}
	return false
}

// newGroupTransport returns the transport of group on brokers, with the
// security of sc (the user's sarama configuration, before useKafkaDialer
// replaced its proxy dialer: tlsConf and saslConf are read from it) and
// every connection dialed by d, and the kgo options extra. It opens no
// connection: the first request does. close closes it.
func newGroupTransport(sc *sarama.Config, d *kafkaDialer, brokers []string, group string, extra ...kgo.Opt) (*groupTransport, error) {
	opts, err := transportOpts(sc, d, brokers...)
	if err != nil {
		return nil, err
	}
	opts = append(opts, kgo.RequestRetries(0), kgo.RetryTimeout(sc.Net.ReadTimeout))
	opts = append(opts, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("the group transport: %w", err)
	}
	return &groupTransport{cl: cl, group: group, timeout: sc.Net.ReadTimeout}, nil
}

// transportOpts returns the options of a kgo client used as a transport
// to brokers (the group transport, a broker loop's connection): every
// connection dialed by d, TLS as sarama does it (transportDial),
// Net.DialTimeout, ClientID, and SASL mapped from sc's Net.SASL
// (saslMechanism). It fails for a SASL mechanism that kgo is not given
// (consumerProtocolSASL).
func transportOpts(sc *sarama.Config, d *kafkaDialer, brokers ...string) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.Dialer(transportDial(sc, d)),
		kgo.DialTimeout(sc.Net.DialTimeout),
	}
	if sc.ClientID != "" {
		opts = append(opts, kgo.ClientID(sc.ClientID))
	}
	if sc.Net.SASL.Enable {
		m, err := saslMechanism(sc)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// transportDial returns kgo's dial function: d's dial (the user's proxy,
// or Net.DialTimeout, Net.KeepAlive, Net.LocalAddr), ended by ctx or by
// d's stop, then the TLS handshake of Net.TLS as sarama does it.
func transportDial(sc *sarama.Config, d *kafkaDialer) func(ctx context.Context, network, host string) (net.Conn, error) {
	tlsEnable, tlsConf, dialTimeout := sc.Net.TLS.Enable, sc.Net.TLS.Config, sc.Net.DialTimeout
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := d.dialContext(ctx, network, host)
		if err != nil || !tlsEnable {
			return conn, err
		}
		tc := tls.Client(conn, validServerName(host, tlsConf))
		hctx, cancel := context.WithTimeout(ctx, dialTimeout)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return tc, nil
	}
}

// validServerName returns cfg (a TLS 1.2 minimum one when nil) with the
// host of addr as ServerName when it has none, as sarama's brokers do.
func validServerName(addr string, cfg *tls.Config) *tls.Config {
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if cfg.ServerName != "" {
		return cfg
	}
	c := cfg.Clone()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		c.ServerName = host
	}
	return c
}

// saslMechanism maps sarama's Net.SASL onto franz-go's mechanism.
func saslMechanism(sc *sarama.Config) (sasl.Mechanism, error) {
	s := sc.Net.SASL
	switch s.Mechanism {
	case "", sarama.SASLTypePlaintext:
		return plain.Auth{Zid: s.AuthIdentity, User: s.User, Pass: s.Password}.AsMechanism(), nil
	case sarama.SASLTypeSCRAMSHA256:
		return scram.Auth{Zid: s.SCRAMAuthzID, User: s.User, Pass: s.Password}.AsSha256Mechanism(), nil
	case sarama.SASLTypeSCRAMSHA512:
		return scram.Auth{Zid: s.SCRAMAuthzID, User: s.User, Pass: s.Password}.AsSha512Mechanism(), nil
	case sarama.SASLTypeOAuth:
		provider := s.TokenProvider
		if provider == nil {
			return nil, errors.New("Net.SASL.TokenProvider is nil")
		}
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			t, err := provider.Token()
			if err != nil {
				return oauth.Auth{}, err
			}
			return oauth.Auth{Token: t.Token, Extensions: t.Extensions}, nil
		}), nil
	}
	return nil, fmt.Errorf("SASL mechanism %s is not supported by the group transport", s.Mechanism)
}

// request sends req to any broker (kgo's routing) and returns its answer,
// within the transport's timeout or until ctx is done.
func (t *groupTransport) request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.cl.Request(ctx, req)
}

// coordinatorRequest sends req to the group's coordinator, looking it up
// first when not known, and returns its answer, within the transport's
// timeout or until ctx is done. A request that fails forgets the
// coordinator; so does forgetCoordinator, for an answer that says it
// moved.
func (t *groupTransport) coordinatorRequest(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	b, err := t.coordinatorBroker(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := b.Request(ctx, req)
	if err != nil {
		t.forget(b)
		return nil, err
	}
	return resp, nil
}

// coordinatorBroker returns the group's coordinator, looking it up when
// not known.
func (t *groupTransport) coordinatorBroker(ctx context.Context) (*kgo.Broker, error) {
	t.mu.Lock()
	b := t.coordinator
	t.mu.Unlock()
	if b != nil {
		return b, nil
	}
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = t.group
	req.CoordinatorKeys = []string{t.group}
	resp, err := req.RequestWith(ctx, t.cl)
	if err != nil {
		return nil, fmt.Errorf("find the coordinator of group %s: %w", t.group, err)
	}
	node, code := resp.NodeID, resp.ErrorCode
	if len(resp.Coordinators) > 0 {
		node, code = resp.Coordinators[0].NodeID, resp.Coordinators[0].ErrorCode
	}
	if err := kerr.ErrorForCode(code); err != nil {
		return nil, fmt.Errorf("find the coordinator of group %s: %w", t.group, err)
	}
	b = t.cl.Broker(int(node))
	t.mu.Lock()
	t.coordinator = b
	t.mu.Unlock()
	return b, nil
}

// forget forgets the coordinator b, so that the next request looks it up
// again.
func (t *groupTransport) forget(b *kgo.Broker) {
	t.mu.Lock()
	if t.coordinator == b {
		t.coordinator = nil
	}
	t.mu.Unlock()
}

// forgetCoordinator forgets the coordinator, whatever it is.
func (t *groupTransport) forgetCoordinator() {
	t.mu.Lock()
	t.coordinator = nil
	t.mu.Unlock()
}

// close closes the transport's connections; a request in flight fails.
func (t *groupTransport) close() {
	t.cl.Close()
}

// coordinatorMovedCode reports whether the error code of an answer says
// that the group's coordinator moved or is not ready.
func coordinatorMovedCode(code int16) bool {
	switch code {
	case kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorLoadInProgress.Code:
		return true
	}
	return false
}
