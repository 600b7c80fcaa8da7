package process

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// leakOptions are the goroutines that outlive a consumer on purpose:
// go-metrics' meter ticker, which sarama starts once per process.
var leakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
}

// TestMain runs a child process of TestByKeyThroughRebalanceAndKill when
// childEnv is set; else the tests, failing the run when goroutines are
// left after them.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m, leakOptions...)
}
