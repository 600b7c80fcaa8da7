package testcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFeatureRelease(t *testing.T) {
	for v, want := range map[string]int{"17.0.15": 17, "1.8.0_412": 8, "25": 25, "21-ea": 21, "x": 0} {
		if got := featureRelease(v); got != want {
			t.Errorf("featureRelease(%q) = %d, want %d", v, got, want)
		}
	}
}

func TestJavaRangeFor(t *testing.T) {
	for _, tc := range []struct {
		kafka, zookeeper string
		min, max         int
	}{
		{"2.8.2", "", 8, 17},
		{"2.8.2", "3.5.10", 8, 17},
		{"3.4.1", "3.6.4", 8, 17},
		{"3.9.1", "", 8, 23},
		{"3.9.1", "3.9.4", 8, 21},
		{"3.7.2", "", 8, 17},
		{"4.1.1", "3.8.4", 17, 21},
		{"4.1.1", "", 17, 25},
	} {
		r := javaRangeFor(tc.kafka, tc.zookeeper)
		if r.min != tc.min || r.max != tc.max {
			t.Errorf("javaRangeFor(%s, %s) = %d..%d, want %d..%d", tc.kafka, tc.zookeeper, r.min, r.max, tc.min, tc.max)
		}
	}
}

// fakeJDK makes a JDK home whose release file says version, with a
// bin/java that is never run.
func fakeJDK(t *testing.T, root, name, version string) string {
	t.Helper()
	home := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Join(home, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "bin", "java"), []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "release"), []byte(`JAVA_VERSION="`+version+`"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return home
}

// A JAVA_HOME outside the Kafka release's range is passed over for an
// installed Java that fits, and the choice is logged; with none that fits,
// the error says what is needed and what was found.
func TestPickJava(t *testing.T) {
	root := t.TempDir()
	java25 := fakeJDK(t, root, "jdk-25", "25.0.1")
	fakeJDK(t, root, "jdk-17", "17.0.15")
	saved := jvmRoots
	t.Cleanup(func() { jvmRoots = saved })
	jvmRoots = []string{root}
	t.Setenv("JAVA_HOME", java25)
	t.Setenv("PATH", t.TempDir())

	var logged []string
	logf := func(format string, args ...any) { logged = append(logged, format) }
	java, err := pickJava("2.8.2", "3.5.10", logf)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "jdk-17", "bin", "java"); java != want {
		t.Errorf("pickJava = %s, want %s", java, want)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "using Java") {
		t.Errorf("logged %q, want one line saying which Java", logged)
	}

	if err := os.RemoveAll(filepath.Join(root, "jdk-17")); err != nil {
		t.Fatal(err)
	}
	_, err = pickJava("2.8.2", "", logf)
	if err == nil || !strings.Contains(err.Error(), "Java 8 to 17") || !strings.Contains(err.Error(), "25.0.1") {
		t.Errorf("pickJava with only Java 25 = %v, want an error naming the range and the Java found", err)
	}
}
