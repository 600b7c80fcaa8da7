package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// restartExited restarts every instance of the group (not an extra one)
// whose process exited on its own, and records each in so.unstable, so
// that the run fails: a Join that returned an error (the child exits 1),
// or a consumer that closed its Messages. Every fault starts again the
// instances it stops before the nemesis waits for the group (the kill and
// the leave in their heals, the rejoin and the rolling move before their
// own waits), so a group instance found dead then exited on its own; left
// dead, it would shrink the group silently, the group being stable
// without it. Called by waitStable, on the nemesis's goroutine.
func (so *soak) restartExited() {
	for _, in := range so.insts {
		if in.extra || in.exited == nil || in.alive() {
			continue
		}
		msg := fmt.Sprintf("%s exited on its own (%s: %s); restarted", in.name, in.cmd.ProcessState, lastLine(filepath.Join(so.s.dir, in.name+".stderr")))
		if err := so.start(in); err != nil {
			msg = fmt.Sprintf("%s exited on its own (%s); its restart failed: %s", in.name, in.cmd.ProcessState, err)
		}
		logf("%s", msg)
		so.unstable = append(so.unstable, msg)
	}
}

// lastLine returns the last line of a file, "" when it cannot be read.
func lastLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	return string(lines[len(lines)-1])
}
