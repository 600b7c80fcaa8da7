package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// The cluster of a run lives in clusterSubdir of the run's directory
// (testcluster.Options.Dir, which Close keeps); at the end of the run,
// failed or not, keepClusterLogs moves each node's logs to logsSubdir
// and removes the rest (data, configuration).
const (
	clusterSubdir = "cluster"
	logsSubdir    = "logs"
)

// keepClusterLogs moves the logs (the *.log files: server.log, the log4j
// output of ZooKeeper and Kafka, and stdout.log, the JVM's) of every node
// directory under dir/clusterSubdir (zookeeper-N, kafka-N, …) to
// dir/logsSubdir/<node>/, replacing the previous run's, then removes
// dir/clusterSubdir. Called once the cluster is closed; it reports what
// it could not do and goes on.
func keepClusterLogs(dir string) {
	cluster, logs := filepath.Join(dir, clusterSubdir), filepath.Join(dir, logsSubdir)
	if err := os.RemoveAll(logs); err != nil {
		logf("keeping the cluster's logs: %s", err)
	}
	files, _ := filepath.Glob(filepath.Join(cluster, "*", "*.log"))
	kept := 0
	for _, f := range files {
		to := filepath.Join(logs, filepath.Base(filepath.Dir(f)), filepath.Base(f))
		if err := moveFile(f, to); err != nil {
			logf("keeping the cluster's logs: %s", err)
			continue
		}
		kept++
	}
	if err := os.RemoveAll(cluster); err != nil {
		logf("removing the cluster's directory: %s", err)
	}
	if kept > 0 {
		logf("the cluster's logs (%d files) are in %s", kept, logs)
	}
}

// moveFile moves from to to, creating to's directory; across file
// systems it copies.
func moveFile(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if err := os.Rename(from, to); err == nil {
		return nil
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
