package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestJSONQ(t *testing.T) {
	t.Parallel()
	const list = `[{"group":"a.b","coordinator":"zookeeper","instances":2},
		{"group":"c","coordinator":"kafka","instances":3}]`
	const group = `{"group":"c","total_lag":0,"total_committed":1200,
		"instances":[{"id":"c1","owned":[{"topic":"t","partition":0}]}],
		"partitions":[{"topic":"t","partition":0,"lag":null}],"static":true}`
	tests := []struct {
		name   string
		doc    string
		args   []string
		out    string
		status int
	}{
		{"selector", list, []string{"[group=c].instances"}, "3\n", 0},
		{"selector with dots", list, []string{"[group=a.b].coordinator"}, "zookeeper\n", 0},
		{"absent with default", list, []string{"-default", "0", "[group=z].instances"}, "0\n", 0},
		{"absent", list, []string{"[group=z].instances"}, "", 1},
		{"several", group, []string{"total_lag", "total_committed", "group"}, "0\n1200\nc\n", 0},
		{"length", group, []string{"instances.#", "instances.0.owned.#"}, "1\n1\n", 0},
		{"index and null", group, []string{"partitions.0.lag"}, "null\n", 0},
		{"boolean selector", `[{"s":true,"n":1}]`, []string{"[s=true].n"}, "1\n", 0},
		{"object prints compact", group, []string{"instances.0.owned.0"}, `{"partition":0,"topic":"t"}` + "\n", 0},
		{"field of a number", group, []string{"total_lag.x"}, "", 1},
		{"bad selector", list, []string{"[group]"}, "", 2},
		{"empty step", list, []string{"0..group"}, "", 2},
		{"not JSON", "{", []string{"a"}, "", 2},
		{"no path", list, nil, "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			status := run(tt.args, strings.NewReader(tt.doc), &stdout, &stderr)
			if status != tt.status || stdout.String() != tt.out {
				t.Errorf("jsonq %q = %d, %q (stderr %q); want %d, %q",
					tt.args, status, stdout.String(), stderr.String(), tt.status, tt.out)
			}
			if status != 0 && stderr.Len() == 0 {
				t.Errorf("jsonq %q failed with nothing on stderr", tt.args)
			}
		})
	}
}
