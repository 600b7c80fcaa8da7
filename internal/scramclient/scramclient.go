// Package scramclient gives sarama the SCRAM client it needs for SASL
// SCRAM-SHA-256 and SCRAM-SHA-512 (sarama leaves the implementation to its
// users), built on github.com/xdg-go/scram as sarama's own examples do.
package scramclient

import (
	"crypto/sha256"
	"crypto/sha512"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// client is a sarama.SCRAMClient for one authentication. It is not safe
// for concurrent use; sarama makes a new one per connection.
type client struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

// Begin starts a conversation for user and password.
func (c *client) Begin(user, password, authzID string) error {
	sc, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	c.conv = sc.NewConversation()
	return nil
}

// Step answers the server's challenge.
func (c *client) Step(challenge string) (string, error) {
	return c.conv.Step(challenge)
}

// Done reports whether the conversation is complete.
func (c *client) Done() bool { return c.conv.Done() }

// Configure sets cfg.Net.SASL for the SCRAM mechanism named mechanism
// (sarama.SASLTypeSCRAMSHA256 or sarama.SASLTypeSCRAMSHA512) with user and
// password, and enables SASL. It reports false for another mechanism and
// then leaves cfg unchanged.
func Configure(cfg *sarama.Config, mechanism, user, password string) bool {
	var hash scram.HashGeneratorFcn
	switch mechanism {
	case sarama.SASLTypeSCRAMSHA256:
		hash = sha256.New
	case sarama.SASLTypeSCRAMSHA512:
		hash = sha512.New
	default:
		return false
	}
	cfg.Net.SASL.Enable = true
	cfg.Net.SASL.Handshake = true
	cfg.Net.SASL.Mechanism = sarama.SASLMechanism(mechanism)
	cfg.Net.SASL.User = user
	cfg.Net.SASL.Password = password
	cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &client{hash: hash} }
	return true
}
