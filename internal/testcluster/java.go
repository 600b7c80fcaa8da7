package testcluster

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// javaRange is the range of Java feature releases (8, 11, 17, …) a
// cluster of some versions runs on.
type javaRange struct {
	min, max int
	why      string
}

// javaRangeFor returns the Java releases a Kafka release (and the
// ZooKeeper server, if zookeeper is given) is known to run on: the
// releases each project documents (Kafka's "Java Version" section of each
// release's documentation), widened to what was tested here (README,
// "Supported versions"):
//
//   - Kafka 1.1 to 2.0 document Java 8, 2.1 to 2.8 Java 8 and 11; 1.1.1,
//     2.0.1, 2.2.2, 2.4.1, 2.6.3 and 2.8.2 were tested here on Java 17
//     (Debian 12 has no Java 8 or 11) and run (2.0 to 2.3 with ZooKeeper
//     3.5.9's jars: see zookeeperClientFor).
//   - Kafka 3.0 to 3.8 document Java 8, 11 and 17 (3.0's page says 8 and
//     11; its release added 17); 3.9 adds 21 and 23.
//   - Kafka 4 brokers need Java 17 (4.0 documents 17 and 23 for
//     brokers); 4.1.1 and 4.4.0 ran here on Java 17.
//   - ZooKeeper 3.5 and 3.6 document Java 8 and 11; 3.5.10 and 3.6.4 were
//     tested here on Java 17. 3.7 and later run on 17 and 21.
func javaRangeFor(kafka, zookeeper string) javaRange {
	r := javaRange{min: 8, max: 23, why: "Kafka " + kafka + " runs on Java 8 to 23"}
	switch mm := majorMinor(kafka); {
	case mm < 300:
		r = javaRange{min: 8, max: 17, why: "Kafka " + kafka + " runs on Java 8 to 17 (documented: 8 and 11; 17 tested here)"}
	case mm < 309:
		r = javaRange{min: 8, max: 17, why: "Kafka " + kafka + " runs on Java 8 to 17"}
	case mm >= 400:
		r = javaRange{min: 17, max: 25, why: "Kafka " + kafka + " brokers run on Java 17 to 25"}
	}
	if zookeeper != "" {
		zmax := 21
		if majorMinor(zookeeper) < 307 {
			zmax = 17 // documented 11; 17 tested here
		}
		if zmax < r.max {
			r.max = zmax
			r.why += fmt.Sprintf(", ZooKeeper %s up to Java %d", zookeeper, zmax)
		}
	}
	return r
}

// majorMinor returns 100*major+minor of a version "X.Y.Z" (0 if it does
// not parse).
func majorMinor(v string) int {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return 0
	}
	return 100*major + minor
}

// jdk is a Java installation found on this machine.
type jdk struct {
	java    string // its bin/java
	feature int    // 17 for 17.0.15, 8 for 1.8.0_412
	version string
}

// javaReleasePattern reads JAVA_VERSION="17.0.15" from a JDK's release
// file, or the version java -version prints.
var javaReleasePattern = regexp.MustCompile(`(?:JAVA_VERSION=|version )"([0-9][^"]*)"`)

// featureRelease returns 17 for "17.0.15", 8 for "1.8.0_412".
func featureRelease(v string) int {
	v = strings.TrimPrefix(v, "1.")
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		v = v[:end]
	}
	n, _ := strconv.Atoi(v)
	return n
}

// inspectJava returns the Java installation of a java binary (symlinks
// resolved), from its home's release file or from java -version.
func inspectJava(java string) (jdk, bool) {
	real, err := filepath.EvalSymlinks(java)
	if err != nil {
		return jdk{}, false
	}
	if st, err := os.Stat(real); err != nil || st.IsDir() {
		return jdk{}, false
	}
	home := filepath.Dir(filepath.Dir(real))
	var version string
	if b, err := os.ReadFile(filepath.Join(home, "release")); err == nil {
		if m := javaReleasePattern.FindSubmatch(b); m != nil {
			version = string(m[1])
		}
	}
	if version == "" {
		out, err := exec.Command(real, "-version").CombinedOutput()
		if err != nil {
			return jdk{}, false
		}
		m := javaReleasePattern.FindSubmatch(out)
		if m == nil {
			return jdk{}, false
		}
		version = string(m[1])
	}
	f := featureRelease(version)
	if f == 0 {
		return jdk{}, false
	}
	return jdk{java: real, feature: f, version: version}, true
}

// jvmRoots are the directories that hold JDKs (Debian: /usr/lib/jvm).
var jvmRoots = []string{"/usr/lib/jvm", "/usr/java", "/opt/java"}

// findJavas returns the Java installations of this machine, in order of
// preference: $JAVA_HOME, java on $PATH, then those under jvmRoots,
// newest first; each binary once.
func findJavas() []jdk {
	var candidates []string
	if home := os.Getenv("JAVA_HOME"); home != "" {
		candidates = append(candidates, filepath.Join(home, "bin", "java"))
	}
	if j, err := exec.LookPath("java"); err == nil {
		candidates = append(candidates, j)
	}
	var found []jdk
	for _, root := range jvmRoots {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if j, ok := inspectJava(filepath.Join(root, e.Name(), "bin", "java")); ok {
				found = append(found, j)
			}
		}
	}
	slices.SortStableFunc(found, func(a, b jdk) int { return b.feature - a.feature })
	var out []jdk
	seen := make(map[string]bool)
	for _, c := range candidates {
		if j, ok := inspectJava(c); ok && !seen[j.java] {
			seen[j.java] = true
			out = append(out, j)
		}
	}
	for _, j := range found {
		if !seen[j.java] {
			seen[j.java] = true
			out = append(out, j)
		}
	}
	return out
}

// pickJava returns the java binary to run Kafka kafka (and ZooKeeper
// zookeeper, "" for the one Kafka brings) with: $JAVA_HOME's or the one on
// $PATH when it fits their Java range, else the newest installed one that
// fits. When none fits, the error names the range, the Javas found and
// the Debian packages that would fit.
func pickJava(kafka, zookeeper string, logf func(string, ...any)) (string, error) {
	r := javaRangeFor(kafka, zookeeper)
	javas := findJavas()
	if len(javas) == 0 {
		return "", fmt.Errorf("testcluster: java is not installed (%s; set JAVA_HOME or put java on $PATH)", r.why)
	}
	for i, j := range javas {
		if j.feature >= r.min && j.feature <= r.max {
			if i > 0 {
				logf("testcluster: %s: using Java %s at %s (the default Java %d does not fit)", r.why, j.version, j.java, javas[0].feature)
			}
			return j.java, nil
		}
	}
	var have []string
	for _, j := range javas {
		have = append(have, fmt.Sprintf("Java %s at %s", j.version, j.java))
	}
	return "", fmt.Errorf("testcluster: no Java fits: %s; found %s. Install one (Debian: %s) and set JAVA_HOME",
		r.why, strings.Join(have, ", "), debianJavaPackages(r))
}

// debianJavaPackages names the Debian packages of the Javas in r that
// apt-cache knows, or the names to look for when it knows none.
func debianJavaPackages(r javaRange) string {
	var names []string
	for v := r.max; v >= r.min; v-- {
		names = append(names, fmt.Sprintf("openjdk-%d-jre-headless", v))
	}
	out, err := exec.Command("apt-cache", append([]string{"policy"}, names...)...).Output()
	if err != nil {
		return fmt.Sprintf("openjdk-N-jre-headless, N from %d to %d; apt-cache is not here to check which exist", r.min, r.max)
	}
	var available []string
	var pkg string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, " ") && strings.HasSuffix(line, ":") {
			pkg = strings.TrimSuffix(line, ":")
		} else if c, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate: "); ok && c != "(none)" && pkg != "" {
			available = append(available, pkg)
		}
	}
	if len(available) == 0 {
		return fmt.Sprintf("no openjdk-N-jre-headless with N from %d to %d is in this machine's apt sources; use another JDK of Java %d to %d, e.g. Adoptium Temurin", r.min, r.max, r.min, r.max)
	}
	return "apt-get install " + available[0]
}
