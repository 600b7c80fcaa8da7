package testcluster

import "testing"

// TestAdminWaitsForItsOwnTimeout: the harness's admin requests
// (CreateTopics, DeleteTopics) ask the controller to answer within
// Admin.Timeout; the connection must wait at least that long for the
// answer, or a slow controller (a freshly started cluster on a loaded
// machine) fails the creation with an i/o timeout while the broker is
// still at it.
func TestAdminWaitsForItsOwnTimeout(t *testing.T) {
	c := &Cluster{kafkaVersion: "3.9.1", security: SecurityPlaintext}
	cfg, err := c.adminConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Net.ReadTimeout <= cfg.Admin.Timeout {
		t.Errorf("the admin's Net.ReadTimeout is %s, not longer than its Admin.Timeout %s", cfg.Net.ReadTimeout, cfg.Admin.Timeout)
	}
}
