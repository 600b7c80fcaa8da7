package kafkaconsumer

import (
	"io"
	"log"
)

// StdLogger is the interface of the package Logger: the subset of the
// standard library's *log.Logger that sarama's StdLogger also has, so a
// *log.Logger, sarama.Logger or slog.NewLogLogger(...) all fit.
type StdLogger interface {
	Print(v ...interface{})
	Printf(format string, v ...interface{})
	Println(v ...interface{})
}

// Logger receives the log lines of every consumer of this package, and those
// of the ZooKeeper client unless Config.Zookeeper.Logger is set to something
// else. It is silent by default. Set it once, before the first Join: it is
// read without synchronisation by the consumers' goroutines.
//
// Lines of a consumer start with "[instance=<last 12 characters of its ID>]",
// and lines of a partition manager add "[partition=<topic>/<partition>]".
// To route them to log/slog:
//
//	kafkaconsumer.Logger = slog.NewLogLogger(slog.Default().Handler(), slog.LevelInfo)
var Logger StdLogger = log.New(io.Discard, "[kafkaconsumer] ", log.LstdFlags)

// zookeeperLogger passes the ZooKeeper client's log lines to the package
// Logger, read at the time of each line so that a Logger set after
// NewConfig still takes effect.
type zookeeperLogger struct{}

// Printf implements the ZooKeeper client's Logger interface.
func (zookeeperLogger) Printf(format string, v ...interface{}) {
	Logger.Printf("[zookeeper] "+format, v...)
}
