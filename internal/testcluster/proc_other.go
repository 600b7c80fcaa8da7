//go:build !unix

package testcluster

import (
	"errors"
	"os"
	"syscall"
)

func sysProcAttr(bool) *syscall.SysProcAttr { return nil }

func signalGroup(pid int, _ syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	return p.Kill()
}

func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	_, err := os.FindProcess(pid)
	return err == nil
}

func pidArgs(int) ([]string, bool) { return nil, false }

func findNodeProcs(string) []int { return nil }

func lockFile(string) (func(), error) {
	return nil, errors.New("testcluster: file locking is not supported on this platform")
}
