//go:build unix && !linux

package testcluster

import (
	"syscall"
)

// sysProcAttr: without Pdeathsig outside Linux, a JVM of a non-detached
// cluster survives a test binary that is killed before Close runs.
func sysProcAttr(detached bool) *syscall.SysProcAttr {
	if detached {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Setpgid: true}
}

func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

func pidArgs(int) ([]string, bool) { return nil, false }

func findNodeProcs(string) []int { return nil }
