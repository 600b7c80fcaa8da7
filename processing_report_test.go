package kafkaconsumer

import (
	"errors"
	"testing"
)

// TestProcessingReport: Processing.Report sends a processing layer's
// error on the consumer's Errors() as it is (errors.Is finds what it
// wraps); the zero Processing drops it.
func TestProcessingReport(t *testing.T) {
	t.Parallel()
	sc := newUnitShareConsumer()
	sc.config.Consumer.Return.Errors = true
	cause := errors.New("limit not read")
	sc.Processing().Report(cause)
	select {
	case err := <-sc.errors:
		if !errors.Is(err, cause) {
			t.Errorf("Errors() = %v, want %v", err, cause)
		}
	default:
		t.Errorf("Report sent nothing on Errors()")
	}
	Processing{}.Report(cause) // no consumer: nothing, no panic
}
