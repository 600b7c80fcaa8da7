//go:build linux

package testcluster

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr returns the attributes of a node's JVM. A non-detached JVM
// gets its own process group (so that a terminal's ^C reaches the test
// binary only, which then tears the cluster down) and SIGKILL when its
// parent dies. A detached JVM starts a new session and outlives its parent.
func sysProcAttr(detached bool) *syscall.SysProcAttr {
	if detached {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// pidAlive reports whether pid is a live (not zombie) process.
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && err != syscall.EPERM {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !os.IsNotExist(err)
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		switch stat[i+2] {
		case 'Z', 'X':
			return false
		}
	}
	return true
}

// pidArgs returns the command line of pid; ok is false when it cannot be
// read.
func pidArgs(pid int) (args []string, ok bool) {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil, false
	}
	for _, a := range bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0}) {
		args = append(args, string(a))
	}
	return args, true
}

// findNodeProcs returns the live processes whose command line carries the
// marker of a node directory under dir.
func findNodeProcs(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	prefix := markerPrefix + dir + string(os.PathSeparator)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		args, ok := pidArgs(pid)
		if !ok {
			continue
		}
		for _, a := range args {
			if strings.HasPrefix(a, prefix) && pidAlive(pid) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
