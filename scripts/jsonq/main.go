// Command jsonq prints values picked out of one JSON document read from
// standard input, so that the project's shell scripts read the groups
// tool's --json output without parsing its tables or needing jq.
//
// Usage:
//
//	jsonq [-default VALUE] PATH...
//
// It prints one line for each PATH. A PATH is a list of steps separated by
// dots, each applied to the value the previous one picked:
//
//	name     the field "name" of an object
//	3        element 3 of an array (from 0)
//	[k=v]    the first element of an array that is an object whose field
//	         k is the string v, or a number, boolean or null written as v
//	#        the length of an array or an object, or of a string
//
// A string prints as it is (unquoted), a number, boolean or null as JSON
// writes it, an object or array as compact JSON. A PATH that picks
// nothing prints the -default value if one is given, and is an error
// (exit status 1, after the other PATHs) otherwise. Invalid JSON or an
// invalid PATH is an error with exit status 2.
//
// For example, the number of instances of group g, and the group's total
// lag:
//
//	kafkaconsumer-groups --list --json | jsonq -default 0 '[group=g].instances'
//	kafkaconsumer-groups --group g --json | jsonq total_lag
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// errMissing is returned by pick for a path that picks nothing.
var errMissing = errors.New("picks nothing")

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("jsonq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := fs.String("default", "", "print `VALUE` for a PATH that picks nothing, instead of failing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	hasDefault := false
	fs.Visit(func(f *flag.Flag) { hasDefault = hasDefault || f.Name == "default" })
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: jsonq [-default VALUE] PATH...")
		return 2
	}
	dec := json.NewDecoder(stdin)
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		fmt.Fprintf(stderr, "jsonq: reading the JSON document: %v\n", err)
		return 2
	}
	status := 0
	for _, path := range fs.Args() {
		v, err := pick(doc, path)
		switch {
		case errors.Is(err, errMissing) && hasDefault:
			fmt.Fprintln(stdout, *def)
		case errors.Is(err, errMissing):
			fmt.Fprintf(stderr, "jsonq: %q %v\n", path, err)
			status = max(status, 1)
		case err != nil:
			fmt.Fprintf(stderr, "jsonq: %q: %v\n", path, err)
			return 2
		default:
			fmt.Fprintln(stdout, format(v))
		}
	}
	return status
}

// pick applies the steps of path to doc. Its error wraps errMissing when
// a step finds nothing to pick.
func pick(doc any, path string) (any, error) {
	v := doc
	for _, step := range splitPath(path) {
		switch {
		case step == "":
			return nil, errors.New("empty step")
		case step == "#":
			switch x := v.(type) {
			case []any:
				v = json.Number(strconv.Itoa(len(x)))
			case map[string]any:
				v = json.Number(strconv.Itoa(len(x)))
			case string:
				v = json.Number(strconv.Itoa(len(x)))
			default:
				return nil, fmt.Errorf("%w: # of a %s", errMissing, kind(v))
			}
		case strings.HasPrefix(step, "["):
			k, want, ok := strings.Cut(strings.TrimSuffix(step[1:], "]"), "=")
			if !ok || !strings.HasSuffix(step, "]") {
				return nil, fmt.Errorf("step %q: want [key=value]", step)
			}
			arr, isArr := v.([]any)
			if !isArr {
				return nil, fmt.Errorf("%w: %s of a %s", errMissing, step, kind(v))
			}
			found := false
			for _, el := range arr {
				if obj, isObj := el.(map[string]any); isObj {
					if f, has := obj[k]; has && format(f) == want {
						v, found = el, true
						break
					}
				}
			}
			if !found {
				return nil, fmt.Errorf("%w: no element %s", errMissing, step)
			}
		default:
			switch x := v.(type) {
			case map[string]any:
				f, has := x[step]
				if !has {
					return nil, fmt.Errorf("%w: no field %q", errMissing, step)
				}
				v = f
			case []any:
				i, err := strconv.Atoi(step)
				if err != nil || i < 0 || i >= len(x) {
					return nil, fmt.Errorf("%w: no element %q of an array of %d", errMissing, step, len(x))
				}
				v = x[i]
			default:
				return nil, fmt.Errorf("%w: field %q of a %s", errMissing, step, kind(v))
			}
		}
	}
	return v, nil
}

// splitPath splits a path at the dots that are not inside brackets, so
// that a selector's value may hold dots ([group=a.b]).
func splitPath(path string) []string {
	var steps []string
	depth, start := 0, 0
	for i, r := range path {
		switch {
		case r == '[':
			depth++
		case r == ']' && depth > 0:
			depth--
		case r == '.' && depth == 0:
			steps = append(steps, path[start:i])
			start = i + 1
		}
	}
	return append(steps, path[start:])
}

// format returns a string as it is, and any other value as compact JSON.
func format(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func kind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case nil:
		return "null"
	case bool:
		return "boolean"
	default:
		return "number"
	}
}
