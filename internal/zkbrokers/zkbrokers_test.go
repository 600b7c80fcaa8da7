package zkbrokers

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Registrations as brokers wrote them, by Kafka version and listener setup.
const (
	// Kafka 0.8 (version 1): host and port only.
	regV1 = `{"jmx_port":-1,"timestamp":"1428512949385","host":"kafka1","version":1,"port":9092}`
	// Kafka 0.9 (version 2): endpoints named by protocol, no map.
	regV2 = `{"jmx_port":-1,"timestamp":"1452520470958","endpoints":["PLAINTEXT://kafka1:9092","SSL://kafka1:9093"],"host":"kafka1","version":2,"port":9092}`
	// Kafka 2.x (version 4) with a rack, PLAINTEXT and SSL.
	regV4 = `{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},"endpoints":["PLAINTEXT://kafka1:9092","SSL://kafka1:9093"],"rack":"r1","jmx_port":9999,"host":"kafka1","timestamp":"1575000000000","port":9092,"version":4}`
	// Kafka 3.9 (version 5), plaintext only: the test cluster's.
	regPlain = `{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://127.0.0.1:31539"],"jmx_port":-1,"port":31539,"host":"127.0.0.1","version":5,"timestamp":"1796250538052"}`
	// Kafka 3.9, the only listener SASL_SSL: host null, port -1.
	regSASLSSL = `{"features":{},"listener_security_protocol_map":{"SASL_SSL":"SASL_SSL"},"endpoints":["SASL_SSL://127.0.0.1:29093"],"jmx_port":-1,"port":-1,"host":null,"version":5,"timestamp":"1796250538052"}`
	// Kafka 3.9, named listeners: INTERNAL plaintext for the brokers,
	// EXTERNAL SASL_SSL, CLIENT SASL_PLAINTEXT, TLS SSL; no listener is
	// named PLAINTEXT, so host and port are those of INTERNAL.
	regMixed = `{"features":{},"listener_security_protocol_map":{"INTERNAL":"PLAINTEXT","EXTERNAL":"SASL_SSL","CLIENT":"SASL_PLAINTEXT","TLS":"SSL"},"endpoints":["INTERNAL://kafka-0.kafka:9092","EXTERNAL://kafka-0.example.com:9094","CLIENT://kafka-0.kafka:9095","TLS://kafka-0.kafka:9096"],"jmx_port":-1,"port":9092,"host":"kafka-0.kafka","version":5,"timestamp":"1796250538052"}`
	// The Docker setup: two PLAINTEXT listeners, the one in the
	// containers' network first.
	regDocker = `{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","PLAINTEXT_HOST":"PLAINTEXT"},"endpoints":["PLAINTEXT://broker:29092","PLAINTEXT_HOST://localhost:9092"],"jmx_port":-1,"features":{},"host":"broker","timestamp":"1700000000000","port":29092,"version":5}`
	// Kafka 3.9 on IPv6, SSL only.
	regIPv6 = `{"features":{},"listener_security_protocol_map":{"SSL":"SSL"},"endpoints":["SSL://[::1]:9093"],"jmx_port":-1,"port":-1,"host":null,"version":5,"timestamp":"1796250538052"}`
)

func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		data string
		want []Listener
	}{
		{"v1 host and port", regV1, []Listener{{"PLAINTEXT", "PLAINTEXT", "kafka1:9092"}}},
		{"v2 endpoints without map", regV2, []Listener{{"PLAINTEXT", "PLAINTEXT", "kafka1:9092"}, {"SSL", "SSL", "kafka1:9093"}}},
		{"v4 with rack", regV4, []Listener{{"PLAINTEXT", "PLAINTEXT", "kafka1:9092"}, {"SSL", "SSL", "kafka1:9093"}}},
		{"v5 plaintext", regPlain, []Listener{{"PLAINTEXT", "PLAINTEXT", "127.0.0.1:31539"}}},
		{"v5 SASL_SSL only, host null", regSASLSSL, []Listener{{"SASL_SSL", "SASL_SSL", "127.0.0.1:29093"}}},
		{"v5 named listeners", regMixed, []Listener{
			{"INTERNAL", "PLAINTEXT", "kafka-0.kafka:9092"},
			{"EXTERNAL", "SASL_SSL", "kafka-0.example.com:9094"},
			{"CLIENT", "SASL_PLAINTEXT", "kafka-0.kafka:9095"},
			{"TLS", "SSL", "kafka-0.kafka:9096"},
		}},
		{"v5 IPv6", regIPv6, []Listener{{"SSL", "SSL", "[::1]:9093"}}},
		{"lower-case names", `{"listener_security_protocol_map":{"external":"sasl_ssl"},"endpoints":["external://b:1"],"host":null,"port":-1,"version":5}`,
			[]Listener{{"EXTERNAL", "SASL_SSL", "b:1"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg, err := Parse("7", []byte(tc.data))
			if err != nil {
				t.Fatalf("Parse: %s", err)
			}
			if reg.ID != "7" || !reflect.DeepEqual(reg.Listeners, tc.want) {
				t.Fatalf("Parse = %+v, want ID 7 and listeners %+v", reg, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, data, want string
	}{
		{"not JSON", `{"host":`, "registration"},
		{"no endpoints, host null", `{"host":null,"port":-1,"version":5}`, "neither endpoints"},
		{"no endpoints, no port", `{"host":"b","version":1}`, "neither endpoints"},
		{"endpoint without scheme", `{"endpoints":["b:9092"],"version":5}`, "LISTENER://host:port"},
		{"endpoint without port", `{"endpoints":["PLAINTEXT://b"],"version":5}`, "missing port"},
		{"endpoint bad port", `{"endpoints":["PLAINTEXT://b:x"],"version":5}`, "invalid port"},
		{"endpoint IPv6 without brackets", `{"endpoints":["PLAINTEXT://::1:9092"],"version":5}`, "too many colons"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("3", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "broker 3") {
				t.Fatalf("Parse(%s) = %v, want an error naming broker 3 and %q", tc.data, err, tc.want)
			}
		})
	}
}

func TestProtocol(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tls, sasl bool
		want      string
	}{{false, false, "PLAINTEXT"}, {true, false, "SSL"}, {false, true, "SASL_PLAINTEXT"}, {true, true, "SASL_SSL"}} {
		if got := Protocol(tc.tls, tc.sasl); got != tc.want {
			t.Errorf("Protocol(tls %t, sasl %t) = %s, want %s", tc.tls, tc.sasl, got, tc.want)
		}
	}
}

func mustParse(t *testing.T, id, data string) Registration {
	t.Helper()
	reg, err := Parse(id, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestSelect(t *testing.T) {
	t.Parallel()
	// A second broker of the mixed layout.
	regMixed1 := strings.ReplaceAll(regMixed, "kafka-0", "kafka-1")
	cases := []struct {
		name          string
		regs          map[string]string // id -> data, read in id order
		listener      string
		protocol      string
		wantAddrs     []string
		wantListeners []string
		wantSkipped   []string
	}{
		{"plaintext", map[string]string{"0": regPlain}, "", "PLAINTEXT", []string{"127.0.0.1:31539"}, []string{"PLAINTEXT"}, nil},
		{"v1 plaintext", map[string]string{"0": regV1}, "", "PLAINTEXT", []string{"kafka1:9092"}, []string{"PLAINTEXT"}, nil},
		{"v2 SSL by protocol", map[string]string{"0": regV2}, "", "SSL", []string{"kafka1:9093"}, []string{"SSL"}, nil},
		{"SASL_SSL only", map[string]string{"0": regSASLSSL}, "", "SASL_SSL", []string{"127.0.0.1:29093"}, []string{"SASL_SSL"}, nil},
		{"mixed: SASL_SSL by protocol", map[string]string{"0": regMixed, "1": regMixed1}, "", "SASL_SSL",
			[]string{"kafka-0.example.com:9094", "kafka-1.example.com:9094"}, []string{"EXTERNAL"}, nil},
		{"mixed: PLAINTEXT by protocol", map[string]string{"0": regMixed, "1": regMixed1}, "", "PLAINTEXT",
			[]string{"kafka-0.kafka:9092", "kafka-1.kafka:9092"}, []string{"INTERNAL"}, nil},
		{"mixed: SASL_PLAINTEXT by protocol", map[string]string{"0": regMixed}, "", "SASL_PLAINTEXT", []string{"kafka-0.kafka:9095"}, []string{"CLIENT"}, nil},
		{"mixed: SSL by protocol", map[string]string{"0": regMixed}, "", "SSL", []string{"kafka-0.kafka:9096"}, []string{"TLS"}, nil},
		{"mixed: by name, whatever the protocol", map[string]string{"0": regMixed}, "client", "SASL_SSL", []string{"kafka-0.kafka:9095"}, []string{"CLIENT"}, nil},
		{"docker: first PLAINTEXT listener", map[string]string{"1": regDocker}, "", "PLAINTEXT", []string{"broker:29092"}, []string{"PLAINTEXT"}, nil},
		{"docker: the host listener by name", map[string]string{"1": regDocker}, "PLAINTEXT_HOST", "PLAINTEXT", []string{"localhost:9092"}, []string{"PLAINTEXT_HOST"}, nil},
		{"a broker without the listener is skipped", map[string]string{"0": regPlain, "1": regSASLSSL}, "", "SASL_SSL", []string{"127.0.0.1:29093"}, []string{"SASL_SSL"}, []string{"0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ids []string
			for id := range tc.regs {
				ids = append(ids, id)
			}
			SortIDs(ids)
			var regs []Registration
			for _, id := range ids {
				regs = append(regs, mustParse(t, id, tc.regs[id]))
			}
			sel, err := Select(regs, tc.listener, tc.protocol)
			if err != nil {
				t.Fatalf("Select: %s", err)
			}
			if !reflect.DeepEqual(sel.Addrs, tc.wantAddrs) || !reflect.DeepEqual(sel.Listeners, tc.wantListeners) || !reflect.DeepEqual(sel.Skipped, tc.wantSkipped) {
				t.Fatalf("Select = %+v, want addrs %v, listeners %v, skipped %v", sel, tc.wantAddrs, tc.wantListeners, tc.wantSkipped)
			}
		})
	}
}

func TestSelectNoMatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name               string
		regs               []string
		listener, protocol string
		want               []string // in the error message
	}{
		{"SASL_SSL wanted, plaintext cluster", []string{regPlain}, "", "SASL_SSL",
			[]string{"protocol SASL_SSL", "PLAINTEXT (PLAINTEXT)", "1 registered broker"}},
		{"PLAINTEXT wanted, secured cluster", []string{regSASLSSL}, "", "PLAINTEXT",
			[]string{"protocol PLAINTEXT", "SASL_SSL (SASL_SSL)"}},
		{"unknown listener name", []string{regMixed}, "external2", "PLAINTEXT",
			[]string{"listener EXTERNAL2", "CLIENT (SASL_PLAINTEXT), EXTERNAL (SASL_SSL), INTERNAL (PLAINTEXT), TLS (SSL)"}},
		{"no brokers", nil, "", "PLAINTEXT", []string{"0 registered broker(s) have none"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var regs []Registration
			for i, data := range tc.regs {
				regs = append(regs, mustParse(t, string(rune('0'+i)), data))
			}
			_, err := Select(regs, tc.listener, tc.protocol)
			if !errors.Is(err, ErrNoListener) {
				t.Fatalf("Select = %v, want ErrNoListener", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestRead(t *testing.T) {
	t.Parallel()
	nodes := map[string]string{"/brokers/ids/10": regSASLSSL, "/brokers/ids/2": regPlain, "/brokers/ids/a": regV1}
	children := func(node string) ([]string, error) {
		if node != "/brokers/ids" {
			t.Errorf("children(%q)", node)
		}
		return []string{"10", "a", "3", "2"}, nil // 3 deregistered meanwhile
	}
	get := func(node string) ([]byte, bool, error) {
		data, ok := nodes[node]
		return []byte(data), ok, nil
	}
	regs, err := Read(children, get)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, reg := range regs {
		ids = append(ids, reg.ID)
	}
	if want := []string{"2", "10", "a"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("Read: broker IDs %v, want %v", ids, want)
	}

	nodes["/brokers/ids/2"] = `{"host":null}`
	if _, err := Read(children, get); err == nil || !strings.Contains(err.Error(), "broker 2") {
		t.Fatalf("Read with a broken registration = %v, want an error naming broker 2", err)
	}
	failing := errors.New("connection lost")
	if _, err := Read(func(string) ([]string, error) { return nil, failing }, get); !errors.Is(err, failing) {
		t.Fatalf("Read with failing children = %v, want %v", err, failing)
	}
}
