package process

import (
	"testing"

	"go.uber.org/goleak"
)

// leakOptions are the goroutines that outlive a consumer on purpose:
// go-metrics' meter ticker, which sarama starts once per process.
var leakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
}

// TestMain fails the run when goroutines are left after the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakOptions...)
}
