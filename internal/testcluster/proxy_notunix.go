//go:build !unix

package testcluster

import (
	"errors"
	"net"
)

// setBacklog is not supported here: a black hole needs listen(2) on a
// listening socket to change its backlog.
func setBacklog(*net.TCPListener, int) error { return errors.ErrUnsupported }
