package kafkaconsumer

import (
	"crypto/rand"
	"encoding/base64"
)

// newShareMemberID returns a member ID for a share group: the client
// names itself (KIP-932), with 16 random bytes in URL-safe base64, as
// Kafka's Uuid prints them.
func newShareMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}
