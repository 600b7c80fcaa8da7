//go:build unix

package testcluster

import (
	"net"
	"syscall"
)

// setBacklog sets the backlog of the listening socket ln: listen(2) on a
// socket that listens already only changes its backlog.
func setBacklog(ln *net.TCPListener, backlog int) error {
	raw, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var listenErr error
	if err := raw.Control(func(fd uintptr) { listenErr = syscall.Listen(int(fd), backlog) }); err != nil {
		return err
	}
	return listenErr
}
