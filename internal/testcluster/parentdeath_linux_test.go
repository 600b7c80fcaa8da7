package testcluster_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

const childEnv = "TESTCLUSTER_PARENT_DEATH_CHILD"

// TestParentDeath starts a cluster in a child process, kills that process
// with SIGKILL (no Close, no deferred cleanup) and checks that its JVMs die
// with it.
func TestParentDeath(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		parentDeathChild()
		return
	}
	skipShort(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestParentDeath$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if dir, ok := strings.CutPrefix(sc.Text(), "dir "); ok {
			defer os.RemoveAll(dir) // nobody else will
			continue
		}
		if rest, ok := strings.CutPrefix(sc.Text(), "PIDS "); ok {
			for _, f := range strings.Fields(rest) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, pid)
			}
			break
		}
		t.Log("child:", sc.Text())
	}
	if len(pids) == 0 {
		_ = cmd.Wait()
		t.Fatal("the child process did not report its JVMs")
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("JVM %d is not running before its parent dies: %v", pid, err)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := testcluster.WaitGone(pids, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func parentDeathChild() {
	c, err := testcluster.Start(testcluster.Options{QuickBrokers: true})
	if err != nil {
		fmt.Println("start:", err)
		os.Exit(1)
	}
	fmt.Println("dir", c.Dir())
	fmt.Print("PIDS")
	for _, pid := range c.Pids() {
		fmt.Print(" ", pid)
	}
	fmt.Println()
	time.Sleep(time.Hour) // until killed
}
