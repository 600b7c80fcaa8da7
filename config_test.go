package kafkaconsumer

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestNewConfigDefaults(t *testing.T) {
	t.Parallel()
	c := NewConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("default config invalid: %s", err)
	}
	checks := []struct {
		name      string
		got, want interface{}
	}{
		{"MaxProcessingTime", c.MaxProcessingTime, 60 * time.Second},
		{"MaxPendingAcks", c.MaxPendingAcks, DefaultMaxPendingAcks},
		{"Offsets.Initial", c.Offsets.Initial, sarama.OffsetOldest},
		{"Consumer.Offsets.Initial", c.Consumer.Offsets.Initial, c.Offsets.Initial},
		{"Zookeeper.Timeout", c.Zookeeper.Timeout, 6 * time.Second},
		{"Consumer.Return.Errors", c.Consumer.Return.Errors, true},
		{"Zookeeper.Logger", c.Zookeeper.Logger, zookeeperLogger{}},
	}
	for _, check := range checks {
		if check.got != check.want {
			t.Errorf("%s = %v, want %v", check.name, check.got, check.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(*Config)
		want   string // in the error message
	}{
		{"MaxProcessingTime zero", func(c *Config) { c.MaxProcessingTime = 0 }, "MaxProcessingTime"},
		{"MaxProcessingTime negative", func(c *Config) { c.MaxProcessingTime = -time.Second }, "MaxProcessingTime"},
		{"MaxPendingAcks zero", func(c *Config) { c.MaxPendingAcks = 0 }, "MaxPendingAcks"},
		{"Offsets.Initial other", func(c *Config) { c.Offsets.Initial = 42 }, "Offsets.Initial"},
		{"BatchSize negative", func(c *Config) { c.BatchSize = -1 }, "BatchSize"},
		{"BatchSize over MaxPendingAcks", func(c *Config) { c.BatchSize = 100; c.MaxPendingAcks = 50 }, "BatchSize (100) must not exceed MaxPendingAcks (50)"},
		{"BatchLinger negative", func(c *Config) { c.BatchSize = 10; c.BatchLinger = -time.Second }, "BatchLinger"},
		{"BatchLinger without BatchSize", func(c *Config) { c.BatchLinger = time.Second }, "BatchSize is 0"},
		{"Zookeeper.Timeout zero", func(c *Config) { c.Zookeeper.Timeout = 0 }, "Zookeeper.Timeout"},
		{"Zookeeper nil", func(c *Config) { c.Zookeeper = nil }, "Zookeeper"},
		{"sarama nil", func(c *Config) { c.Config = nil }, "sarama"},
		{"sarama invalid", func(c *Config) { c.ChannelBufferSize = -1 }, "ChannelBufferSize"},
		{"Brokers without port", func(c *Config) { c.Brokers = []string{"kafka1"} }, "Brokers"},
		{"Brokers empty host", func(c *Config) { c.Brokers = []string{":9092"} }, "Brokers"},
		{"Brokers bad port", func(c *Config) { c.Brokers = []string{"kafka1:0"} }, "Brokers"},
		{"Brokers port too big", func(c *Config) { c.Brokers = []string{"kafka1:65536"} }, "Brokers"},
		{"Brokers URL", func(c *Config) { c.Brokers = []string{"kafka1:9092", "SASL_SSL://kafka2:9093"} }, "Brokers"},
		{"Brokers empty entry", func(c *Config) { c.Brokers = []string{""} }, "Brokers"},
		{"Brokers IPv6 without brackets", func(c *Config) { c.Brokers = []string{"::1:9092"} }, "Brokers"},
		{"Listener malformed", func(c *Config) { c.Listener = "SASL_SSL://" }, "Listener"},
		{"Listener and Brokers", func(c *Config) { c.Listener = "EXTERNAL"; c.Brokers = []string{"kafka1:9092"} }, "Listener"},
		{"Net.Proxy.Enable without Dialer", func(c *Config) { c.Net.Proxy.Enable = true }, "Net.Proxy.Enable (sarama) is set but Net.Proxy.Dialer is nil"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewConfig()
			tc.change(c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %q, want it to name %s", err, tc.want)
			}
		})
	}
	var nilConfig *Config
	if err := nilConfig.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("nil Validate() = %v", err)
	}
	for _, brokers := range [][]string{{"kafka1:9092"}, {"10.0.0.1:9093", "[::1]:9094", "kafka-2.example.com:19092"}} {
		c := NewConfig()
		c.Brokers = brokers
		if err := c.Validate(); err != nil {
			t.Errorf("Brokers %q rejected: %s", brokers, err)
		}
	}
	listener := NewConfig()
	listener.Listener = "EXTERNAL_SASL-1"
	if err := listener.Validate(); err != nil {
		t.Errorf("Listener %q rejected: %s", listener.Listener, err)
	}
	newest := NewConfig()
	newest.Offsets.Initial = sarama.OffsetNewest
	if err := newest.Validate(); err != nil {
		t.Fatalf("OffsetNewest rejected: %s", err)
	}
}

// TestValidateRefusesAnIgnoredSaramaOffsetsInitial: sarama's
// Consumer.Offsets.Initial is not used; Validate refuses a value there
// that is neither NewConfig's nor Offsets.Initial, naming both, and
// accepts the defaults, a change of Offsets.Initial alone, and both set
// alike.
func TestValidateRefusesAnIgnoredSaramaOffsetsInitial(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		sarama, our int64
		want        string // in the error; "" for none
	}{
		{"defaults", sarama.OffsetOldest, sarama.OffsetOldest, ""},
		{"ours newest", sarama.OffsetOldest, sarama.OffsetNewest, ""},
		{"both newest", sarama.OffsetNewest, sarama.OffsetNewest, ""},
		{"sarama's newest alone", sarama.OffsetNewest, sarama.OffsetOldest,
			"Config.Consumer.Offsets.Initial (sarama) is sarama.OffsetNewest (-1) but Offsets.Initial is sarama.OffsetOldest (-2): the consumer uses Offsets.Initial; set Offsets.Initial"},
		{"sarama's out of range", 42, sarama.OffsetNewest, "Config.Consumer.Offsets.Initial (sarama) is 42 but Offsets.Initial is sarama.OffsetNewest (-1)"},
	}
	for _, tc := range cases {
		c := NewConfig()
		c.Consumer.Offsets.Initial, c.Offsets.Initial = tc.sarama, tc.our
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate() = %s", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig saying %q", tc.name, err, tc.want)
		}
	}
}

// TestJoinRefusesAChrootThatIsNotTheConnectionString: the chroot is the
// connection string's; Join refuses a Zookeeper.Chroot that differs,
// naming both, and accepts one alike.
func TestJoinRefusesAChrootThatIsNotTheConnectionString(t *testing.T) {
	t.Parallel()
	cases := []struct {
		config, connection string
		refused            bool
	}{
		{"", "", false},
		{"", "/kafka", false},
		{"/kafka", "/kafka", false},
		{"/kafka/", "/kafka", false},
		{"/kafka", "", true},
		{"/a", "/b", true},
	}
	for _, tc := range cases {
		c := NewConfig()
		c.Zookeeper.Chroot = tc.config
		err := c.validateChroot(tc.connection)
		if refused := err != nil; refused != tc.refused || refused && (!errors.Is(err, ErrInvalidConfig) ||
			!strings.Contains(err.Error(), "Zookeeper.Chroot (kazoo) is "+strconv.Quote(tc.config)) ||
			!strings.Contains(err.Error(), "connection string is "+strconv.Quote(tc.connection))) {
			t.Errorf("Chroot %q, connection string's %q: validateChroot() = %v", tc.config, tc.connection, err)
		}
	}
	c := NewConfig()
	c.Zookeeper.Chroot = "/b"
	if _, err := Join("g", TopicSubscription("t"), "127.0.0.1:1/a", c); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Join() = %v, want ErrInvalidConfig", err)
	}
}

func TestSaramaConfigTakesOffsetsInitial(t *testing.T) {
	t.Parallel()
	c := NewConfig()
	c.Config.Consumer.Offsets.Initial = sarama.OffsetNewest
	c.Offsets.Initial = sarama.OffsetOldest
	if got := c.saramaConfig().Consumer.Offsets.Initial; got != sarama.OffsetOldest {
		t.Fatalf("sarama Consumer.Offsets.Initial = %d, want OffsetOldest", got)
	}
	if c.Config.Consumer.Offsets.Initial != sarama.OffsetNewest {
		t.Fatal("saramaConfig changed the caller's config")
	}
}

// The default sarama Version must be one that every supported Kafka
// release understands (README, "Supported versions": 2.8.2 to 3.9.1):
// sarama picks request versions from it, and a broker older than it may
// reject them.
func TestNewConfigVersionSafeForOldestKafka(t *testing.T) {
	t.Parallel()
	oldest := sarama.V2_8_2_0
	if v := NewConfig().Version; v != oldest && v.IsAtLeast(oldest) {
		t.Errorf("NewConfig().Version = %s, newer than the oldest supported Kafka %s", v, oldest)
	}
}
