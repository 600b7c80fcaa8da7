package testcluster

import "strings"

// pidHasArg reports whether the command line of pid contains arg, so that a
// pid recorded in a state file is never mistaken for a recycled one. When
// the command line cannot be read (not Linux) it answers true.
func pidHasArg(pid int, arg string) bool {
	args, ok := pidArgs(pid)
	if !ok {
		return true
	}
	for _, a := range args {
		if a == arg {
			return true
		}
	}
	return false
}

// pidHasArgPrefix is pidHasArg for an argument starting with prefix.
func pidHasArgPrefix(pid int, prefix string) bool {
	args, ok := pidArgs(pid)
	if !ok {
		return true
	}
	for _, a := range args {
		if strings.HasPrefix(a, prefix) {
			return true
		}
	}
	return false
}
