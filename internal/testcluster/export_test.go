package testcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// ErrNoProcNet is returned by DirectQuorumConns where /proc/net/tcp is not.
var ErrNoProcNet = errors.New("no /proc/net/tcp on " + runtime.GOOS)

// DirectQuorumConns returns the established TCP connections from one
// ZooKeeper node's JVM to another node's own quorum or election port, as
// /proc says (Linux only, else ErrNoProcNet). With quorum proxies there
// are none: the nodes reach each other through the proxies, whose
// connections to the nodes' ports belong to the test process.
func DirectQuorumConns(c *Cluster) ([]string, error) {
	if runtime.GOOS != "linux" {
		return nil, ErrNoProcNet
	}
	owner := make(map[int]*node) // quorum and election ports
	for _, n := range c.zks {
		owner[n.quorumPort], owner[n.electionPort] = n, n
	}
	conns, err := procNetTCP()
	if err != nil {
		return nil, err
	}
	var direct []string
	for _, n := range c.zks {
		p := n.running()
		if p == nil {
			continue
		}
		fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", p.pid))
		if err != nil {
			return nil, err
		}
		for _, fd := range fds {
			link, err := os.Readlink(fd)
			if err != nil {
				continue // closed meanwhile
			}
			inode, ok := strings.CutPrefix(link, "socket:[")
			if !ok {
				continue
			}
			remote, ok := conns[strings.TrimSuffix(inode, "]")]
			if !ok {
				continue
			}
			if to := owner[remote]; to != nil && to != n {
				direct = append(direct, fmt.Sprintf("%s -> %s port %d", n, to, remote))
			}
		}
	}
	return direct, nil
}

// procNetTCP returns the remote ports of the established IPv4 TCP
// connections of the network namespace, by socket inode.
func procNetTCP() (map[string]int, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	conns := make(map[string]int)
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when
		// retrnsmt uid timeout inode ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "01" { // TCP_ESTABLISHED
			continue
		}
		_, hex, _ := strings.Cut(fields[2], ":")
		port, err := strconv.ParseInt(hex, 16, 32)
		if err != nil {
			return nil, fmt.Errorf("/proc/net/tcp: %q: %w", sc.Text(), err)
		}
		conns[fields[9]] = int(port)
	}
	return conns, sc.Err()
}
