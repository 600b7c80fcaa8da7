//go:build !linux

package testcluster

import "net"

// acceptQueueFull cannot tell here (known false): BlackHole fills the
// accept queue until a connect hangs.
func acceptQueueFull(*net.TCPListener) (full, known bool) { return false, false }
