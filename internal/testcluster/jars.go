package testcluster

import (
	"bytes"
	_ "embed" // the Maven project that resolves the jars
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// KafkaVersion is the Apache Kafka release whose jars EnsureJars resolves.
const KafkaVersion = "3.9.1"

// JarsEnv names the environment variable that, when set, is the directory
// holding the jars (EnsureJars fills it if it is empty; a Kafka release's
// libs/ directory works too).
const JarsEnv = "KAFKACONSUMER_JARS"

//go:embed jars/pom.xml
var pomXML []byte

// completeMarker is written into the jars directory, listing its jars,
// before the directory is renamed into place.
const completeMarker = ".complete"

// JarsDir returns the directory where the jars are (or will be) cached:
// $KAFKACONSUMER_JARS, or else <user cache dir>/kafkaconsumer/kafka-3.9.1
// ($XDG_CACHE_HOME or ~/.cache on Linux). It does not download anything.
func JarsDir() (string, error) {
	if d := os.Getenv(JarsEnv); d != "" {
		return filepath.Abs(d)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		home, herr := os.UserHomeDir()
		if herr != nil {
			return "", fmt.Errorf("testcluster: no cache directory (%v) and no home directory (%v); set %s", err, herr, JarsEnv)
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "kafkaconsumer", "kafka-"+KafkaVersion), nil
}

// EnsureJars returns a directory holding the jars of a ZooKeeper-mode Kafka
// broker and of the ZooKeeper server (the directory JarsDir names). When
// they are missing or incomplete it runs Maven (`mvn dependency:copy-dependencies`
// on the project in jars/pom.xml, embedded in this package), which takes a
// few seconds with a warm ~/.m2 and needs Maven Central otherwise. The
// result is moved into place atomically, and concurrent callers (several
// test binaries) serialise on a lock file, so only one downloads.
func EnsureJars() (string, error) {
	dir, err := JarsDir()
	if err != nil {
		return "", err
	}
	if jarsComplete(dir) {
		return dir, nil
	}
	if os.Getenv(JarsEnv) != "" && looksLikeKafkaLibs(dir) {
		return dir, nil // a directory the user filled, e.g. a release's libs/
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("testcluster: %w", err)
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return "", fmt.Errorf("testcluster: locking the jars cache: %w", err)
	}
	defer unlock()
	if jarsComplete(dir) { // another process finished while we waited
		return dir, nil
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, completeMarker)); err != nil {
			// Not ours: never delete a directory someone else filled.
			return "", fmt.Errorf("testcluster: %s holds neither the Kafka %s jars nor a download of ours; remove it or point %s elsewhere", dir, KafkaVersion, JarsEnv)
		}
	}
	if err := downloadJars(dir); err != nil {
		return "", err
	}
	return dir, nil
}

func downloadJars(dir string) error {
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return fmt.Errorf("testcluster: the Kafka %s jars are not in %s and Maven (mvn) is not installed to fetch them; install Maven or set %s to a directory of Kafka jars", KafkaVersion, dir, JarsEnv)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	defer os.RemoveAll(tmp)
	pom := filepath.Join(tmp, "pom.xml")
	if err := os.WriteFile(pom, pomXML, 0o644); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	out := filepath.Join(tmp, "jars")
	cmd := exec.Command(mvn, "-q", "-B", "-Dstyle.color=never", "-f", pom,
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+out)
	cmd.Dir = tmp
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("testcluster: mvn dependency:copy-dependencies failed: %v\n%s", err, tailString(log.String(), 40))
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("testcluster: mvn produced no jars: %w", err)
	}
	var jars []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".jar") {
			jars = append(jars, e.Name())
		}
	}
	if !looksLikeKafkaLibs(out) {
		return fmt.Errorf("testcluster: mvn did not produce the Kafka and ZooKeeper jars (got %s)", strings.Join(jars, " "))
	}
	if err := os.WriteFile(filepath.Join(out, completeMarker), []byte(strings.Join(jars, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	// A damaged download of ours (jars deleted since) or an empty directory
	// is replaced; we hold the lock.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	if err := os.Rename(out, dir); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return nil
}

// jarsComplete reports whether dir was completed by downloadJars and still
// holds every jar it listed.
func jarsComplete(dir string) bool {
	list, err := os.ReadFile(filepath.Join(dir, completeMarker))
	if err != nil {
		return false
	}
	for _, name := range strings.Fields(string(list)) {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}
	return looksLikeKafkaLibs(dir)
}

// looksLikeKafkaLibs reports whether dir holds a Kafka broker (Scala 2.13
// build) and a ZooKeeper server jar.
func looksLikeKafkaLibs(dir string) bool {
	for _, pattern := range []string{"kafka_2.13-*.jar", "kafka-clients-*.jar", "zookeeper-[0-9]*.jar"} {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		if len(m) == 0 {
			return false
		}
	}
	return true
}

// javaBinary returns $JAVA_HOME/bin/java, or java from $PATH.
func javaBinary() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		j := filepath.Join(home, "bin", "java")
		if _, err := os.Stat(j); err == nil {
			return j, nil
		}
	}
	j, err := exec.LookPath("java")
	if err != nil {
		return "", errors.New("testcluster: java is not installed (Kafka 3.9 needs Java 11 or later; set JAVA_HOME or put java on $PATH)")
	}
	return j, nil
}

// tailString returns the last n lines of s.
func tailString(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tailFile returns the last n lines of a (possibly large) log file.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no %s: %v)", filepath.Base(path), err)
	}
	defer f.Close()
	const max = 64 << 10
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	k, _ := f.ReadAt(buf, off)
	return tailString(string(buf[:k]), n)
}
