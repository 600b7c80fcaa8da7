package testcluster

import (
	"bytes"
	_ "embed" // the Maven project that resolves the jars
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// DefaultKafkaVersion is the Apache Kafka release whose jars the cluster
// runs when no version is given (Options.KafkaVersion, $KAFKA_VERSION).
const DefaultKafkaVersion = "3.9.1"

// KafkaVersion is DefaultKafkaVersion (the name of earlier versions of this
// package).
const KafkaVersion = DefaultKafkaVersion

// The environment variables that name the versions a cluster runs: read by
// VersionsFromEnv (the command behind make cluster-up, and the root
// package's TestMain), not by Start.
const (
	KafkaVersionEnv     = "KAFKA_VERSION"
	ZooKeeperVersionEnv = "ZOOKEEPER_VERSION"
)

// VersionsFromEnv returns $KAFKA_VERSION (default DefaultKafkaVersion) and
// $ZOOKEEPER_VERSION ("" by default: the ZooKeeper server that the Kafka
// release brings).
func VersionsFromEnv() (kafka, zookeeper string) {
	kafka = strings.TrimSpace(os.Getenv(KafkaVersionEnv))
	if kafka == "" {
		kafka = DefaultKafkaVersion
	}
	return kafka, strings.TrimSpace(os.Getenv(ZooKeeperVersionEnv))
}

// versionPattern is what a version given to this package must look like:
// it becomes part of a directory name and of a Maven coordinate.
var versionPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

func checkVersion(what, v string) error {
	if !versionPattern.MatchString(v) {
		return fmt.Errorf("testcluster: %s version %q is not of the form X.Y.Z", what, v)
	}
	return nil
}

// JarsEnv names the environment variable that, when set, is the directory
// holding the jars of DefaultKafkaVersion (EnsureJars fills it if it is
// empty; a Kafka release's libs/ directory works too). Other versions are
// always cached under the user cache directory.
const JarsEnv = "KAFKACONSUMER_JARS"

//go:embed jars/pom.xml
var pomXML []byte

//go:embed jars/zookeeper-pom.xml
var zookeeperPomXML []byte

// completeMarker is written into the jars directory, listing its jars,
// before the directory is renamed into place.
const completeMarker = ".complete"

// cacheDir returns <user cache dir>/kafkaconsumer ($XDG_CACHE_HOME or
// ~/.cache on Linux).
func cacheDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		home, herr := os.UserHomeDir()
		if herr != nil {
			return "", fmt.Errorf("testcluster: no cache directory (%v) and no home directory (%v); set %s", err, herr, JarsEnv)
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "kafkaconsumer"), nil
}

// JarsDir returns the directory where the jars of DefaultKafkaVersion are
// (or will be) cached: $KAFKACONSUMER_JARS, or else
// <user cache dir>/kafkaconsumer/kafka-3.9.1. It does not download anything.
func JarsDir() (string, error) { return KafkaJarsDir(DefaultKafkaVersion) }

// KafkaJarsDir returns the directory where the jars of a Kafka release are
// (or will be) cached: <user cache dir>/kafkaconsumer/kafka-VERSION, or
// $KAFKACONSUMER_JARS for DefaultKafkaVersion when it is set.
func KafkaJarsDir(version string) (string, error) {
	if err := checkVersion("Kafka", version); err != nil {
		return "", err
	}
	if d := os.Getenv(JarsEnv); d != "" && version == DefaultKafkaVersion {
		return filepath.Abs(d)
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "kafka-"+version), nil
}

// ZooKeeperJarsDir returns the directory where the jars of a ZooKeeper
// server release are (or will be) cached:
// <user cache dir>/kafkaconsumer/zookeeper-VERSION.
func ZooKeeperJarsDir(version string) (string, error) {
	if err := checkVersion("ZooKeeper", version); err != nil {
		return "", err
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "zookeeper-"+version), nil
}

// EnsureJars is EnsureKafkaJars(DefaultKafkaVersion).
func EnsureJars() (string, error) { return EnsureKafkaJars(DefaultKafkaVersion) }

// EnsureKafkaJars returns a directory holding the jars of a Kafka broker
// of the given release and of the ZooKeeper server it brings, up to 3.9
// (Kafka 4 brings none: see DefaultKRaftZooKeeperVersion) (the directory
// KafkaJarsDir names). When they are missing or incomplete
// it runs Maven (`mvn dependency:copy-dependencies` on the project in
// jars/pom.xml, embedded in this package, with the version put in), which
// takes a few seconds with a warm ~/.m2 and needs Maven Central otherwise.
// The result is moved into place atomically, and concurrent callers
// (several test binaries) serialise on a lock file, so only one downloads.
func EnsureKafkaJars(version string) (string, error) {
	dir, err := KafkaJarsDir(version)
	if err != nil {
		return "", err
	}
	if os.Getenv(JarsEnv) != "" && version == DefaultKafkaVersion && looksLikeKafkaLibs(dir) {
		return dir, nil // a directory the user filled, e.g. a release's libs/
	}
	pom := bytes.Replace(pomXML, []byte("<kafka.version>"+DefaultKafkaVersion+"<"), []byte("<kafka.version>"+version+"<"), 1)
	pom = bytes.Replace(pom, []byte("<artifactId>kafka_2.13</artifactId>"), []byte("<artifactId>kafka_"+kafkaScala(version)+"</artifactId>"), 1)
	if zk := zookeeperClientFor(version); zk != "" {
		pom = bytes.Replace(pom, []byte("  </dependencies>"), []byte(zookeeperOverride(zk)+"  </dependencies>"), 1)
	}
	check := looksLikeKafkaLibs
	if majorMinor(version) >= 400 {
		check = looksLikeKRaftLibs // Kafka 4 brings no ZooKeeper
	}
	return ensureJars(dir, pom, "Kafka "+version, check)
}

// EnsureZooKeeperJars returns a directory holding the jars of a ZooKeeper
// server release (org.apache.zookeeper:zookeeper and what it needs at run
// time, with its own logging back end: log4j 1.2 up to 3.7, logback from
// 3.8), fetched and cached like EnsureKafkaJars.
func EnsureZooKeeperJars(version string) (string, error) {
	dir, err := ZooKeeperJarsDir(version)
	if err != nil {
		return "", err
	}
	pom := bytes.ReplaceAll(zookeeperPomXML, []byte("@ZOOKEEPER_VERSION@"), []byte(version))
	pom = bytes.Replace(pom, []byte("@LOGGING@"), []byte(zookeeperLogging(version)), 1)
	check := looksLikeZooKeeperLibs
	if majorMinor(version) >= 306 {
		check = func(dir string) bool {
			m, _ := filepath.Glob(filepath.Join(dir, "metrics-core-*.jar"))
			s, _ := filepath.Glob(filepath.Join(dir, "snappy-java-*.jar"))
			return len(m) > 0 && len(s) > 0 && looksLikeZooKeeperLibs(dir)
		}
	}
	return ensureJars(dir, pom, "ZooKeeper "+version, check)
}

// zookeeperLogging returns the logging (and metrics) dependencies of a
// ZooKeeper release's server, which its POM leaves optional: logback-classic from
// 3.8 on, at the version the release manages (1.2.13 for 3.8.4 and 3.9.3,
// 1.3.15 for 3.9.4, which moved to SLF4J 2); before 3.8 the log4j 1.2
// binding, as reload4j (3.5.10 and 3.6.4 ship log4j 1.2.17).
func zookeeperLogging(version string) string {
	dep := func(group, artifact, version string) string {
		s := "    <dependency>\n      <groupId>" + group + "</groupId>\n      <artifactId>" + artifact + "</artifactId>\n"
		if version != "" {
			s += "      <version>" + version + "</version>\n"
		}
		return s + "    </dependency>\n"
	}
	// From 3.6 the server's default metrics provider needs Dropwizard's
	// metrics-core, and loading the data at start needs snappy-java; the
	// POM leaves both optional too (the tarball ships them). Without them
	// QuorumPeerMain dies with ClassNotFoundException
	// com.codahale.metrics.Reservoir, or its main thread dies with
	// NoClassDefFoundError org/xerial/snappy/SnappyInputStream and the
	// server never serves.
	var metrics string
	if majorMinor(version) >= 306 {
		metrics = dep("io.dropwizard.metrics", "metrics-core", "") + dep("org.xerial.snappy", "snappy-java", "")
	}
	if majorMinor(version) >= 308 {
		return metrics + dep("ch.qos.logback", "logback-classic", "")
	}
	return metrics + dep("org.slf4j", "slf4j-reload4j", "1.7.36") + dep("ch.qos.reload4j", "reload4j", "1.2.25")
}

func ensureJars(dir string, pom []byte, what string, check func(string) bool) (string, error) {
	if jarsComplete(dir, check) {
		return dir, nil
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
	if jarsComplete(dir, check) { // another process finished while we waited
		return dir, nil
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, completeMarker)); err != nil {
			// Not ours: never delete a directory someone else filled.
			return "", fmt.Errorf("testcluster: %s holds neither the %s jars nor a download of ours; remove it or point %s elsewhere", dir, what, JarsEnv)
		}
	}
	if err := downloadJars(dir, pom, what, check); err != nil {
		return "", err
	}
	return dir, nil
}

func downloadJars(dir string, pomXML []byte, what string, check func(string) bool) error {
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return fmt.Errorf("testcluster: the %s jars are not in %s and Maven (mvn) is not installed to fetch them; install Maven or set %s to a directory of Kafka jars", what, dir, JarsEnv)
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
		return fmt.Errorf("testcluster: mvn dependency:copy-dependencies (%s) failed: %v\n%s", what, err, tailString(log.String(), 40))
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
	if !check(out) {
		return fmt.Errorf("testcluster: mvn did not produce the %s jars (got %s)", what, strings.Join(jars, " "))
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
func jarsComplete(dir string, check func(string) bool) bool {
	list, err := os.ReadFile(filepath.Join(dir, completeMarker))
	if err != nil {
		return false
	}
	for _, name := range strings.Fields(string(list)) {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}
	return check(dir)
}

// looksLikeKafkaLibs reports whether dir holds a Kafka broker (of a Scala
// 2.12 or 2.13 build) and a ZooKeeper server jar.
func looksLikeKafkaLibs(dir string) bool {
	return hasJars(dir, "kafka_2.1[23]-*.jar", "kafka-clients-*.jar", "zookeeper-[0-9]*.jar")
}

// kafkaScala returns the Scala build of a Kafka release that the test
// cluster runs: 2.13 from Kafka 2.4 (the first release published for it),
// 2.12 before (Kafka 1.1 to 2.3 are published for 2.11 and 2.12).
func kafkaScala(version string) string {
	if majorMinor(version) < 204 {
		return "2.12"
	}
	return "2.13"
}

// zookeeperClientFor returns the ZooKeeper release whose jars replace the
// ones a Kafka release brings, or "" to keep them. Kafka 2.0 to 2.3 bring
// ZooKeeper 3.4.13 or 3.4.14, whose client cannot connect on Java 14 and
// later (it parses InetSocketAddress.toString(), whose form Java 14
// changed: ZOOKEEPER-3779), and this machine has Java 17 only: they get
// 3.5.9's jars, the client and server of Kafka 2.6 and 2.7, as sarama's
// functional tests do for old brokers. (Kafka 1.1's 3.4.10 resolves
// addresses another way and connects.)
func zookeeperClientFor(kafka string) string {
	if mm := majorMinor(kafka); mm >= 200 && mm < 204 {
		return "3.5.9"
	}
	return ""
}

// zookeeperOverride returns the dependencies of a POM that pin the
// ZooKeeper jars to a release (zookeeperClientFor), without the log4j
// and its slf4j binding that ZooKeeper's POM brings (reload4j is the test
// cluster's, as Kafka's POM excludes them from its own ZooKeeper).
func zookeeperOverride(version string) string {
	const exclusions = "      <exclusions>\n" +
		"        <exclusion><groupId>log4j</groupId><artifactId>log4j</artifactId></exclusion>\n" +
		"        <exclusion><groupId>org.slf4j</groupId><artifactId>slf4j-log4j12</artifactId></exclusion>\n" +
		"      </exclusions>\n"
	dep := func(artifact string) string {
		return "    <dependency>\n      <groupId>org.apache.zookeeper</groupId>\n      <artifactId>" + artifact +
			"</artifactId>\n      <version>" + version + "</version>\n" + exclusions + "    </dependency>\n"
	}
	return dep("zookeeper") + dep("zookeeper-jute")
}

// hasJars reports whether dir holds a file matching each pattern.
func hasJars(dir string, patterns ...string) bool {
	for _, pattern := range patterns {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		if len(m) == 0 {
			return false
		}
	}
	return true
}

// looksLikeKRaftLibs reports whether dir holds a Kafka broker (Scala 2.13
// build), its clients and the log4j 1.2 binding (reload4j) that the
// test cluster's logging configuration uses: Kafka 4's jars.
func looksLikeKRaftLibs(dir string) bool {
	return hasJars(dir, "kafka_2.13-*.jar", "kafka-clients-*.jar", "reload4j-*.jar")
}

// looksLikeZooKeeperLibs reports whether dir holds a ZooKeeper server jar
// and a logging back end for it.
func looksLikeZooKeeperLibs(dir string) bool {
	for _, patterns := range [][]string{{"zookeeper-[0-9]*.jar"}, {"logback-classic-*.jar", "reload4j-*.jar"}} {
		found := false
		for _, pattern := range patterns {
			m, _ := filepath.Glob(filepath.Join(dir, pattern))
			found = found || len(m) > 0
		}
		if !found {
			return false
		}
	}
	return true
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
