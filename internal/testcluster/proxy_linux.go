package testcluster

import (
	"net"
	"syscall"
	"unsafe"
)

// acceptQueueFull reports whether the accept queue of the listening
// socket ln is full, so that the kernel drops new SYNs: TCP_INFO of a
// listening socket gives the queue's length (tcpi_unacked) and its
// backlog (tcpi_sacked), and the queue is full when the length exceeds
// the backlog. known is false when TCP_INFO cannot be read.
func acceptQueueFull(ln *net.TCPListener) (full, known bool) {
	raw, err := ln.SyscallConn()
	if err != nil {
		return false, false
	}
	var info syscall.TCPInfo
	var errno syscall.Errno
	err = raw.Control(func(fd uintptr) {
		size := uint32(syscall.SizeofTCPInfo)
		_, _, errno = syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO,
			uintptr(unsafe.Pointer(&info)), uintptr(unsafe.Pointer(&size)), 0)
	})
	if err != nil || errno != 0 {
		return false, false
	}
	return info.Unacked > info.Sacked, true
}
