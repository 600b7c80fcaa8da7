// Package commitmark writes and reads kafkaconsumer's committed offsets
// in their two conventions.
//
// kafkaconsumer, Kafka's own clients and originals (wvanbergen/kafka)
// built on sarama v1.10 or later start a partition at its committed
// offset: kafkaconsumer commits the next offset to read (N+1 after
// processing message N; such an original commits N, and so reads N
// again). Originals built on sarama v1.9 or older commit the offset of the
// last message processed (N) and start at the committed offset + 1: a
// partition that moves to one of them from an instance that committed N+1
// skips message N+1.
//
// kafkaconsumer's Config.CommitLastProcessed makes an instance commit in
// the originals' convention. Each of its commits says its convention in
// the commit's metadata, so that instances with and without the setting
// read each other's commits right whatever their own setting; a commit
// without the mark (an original's, a tool's, or one of a release before
// the mark) is read in the reader's own convention.
package commitmark

// The metadata of kafkaconsumer's commits: the convention of the offset.
const (
	NextMark = "kafkaconsumer:next"
	LastMark = "kafkaconsumer:last"
)

// Encode returns the offset and metadata to commit for a partition
// whose next offset to read is next. In the last-processed convention a
// next offset of 0 is committed as -1: kafkaconsumer reads it back as 0
// (by its mark), an original as no committed offset, so that it starts at
// its own Offsets.Initial (the originals' convention has no way to say
// "start at 0"; committed as 0 it would skip message 0).
func Encode(next int64, lastProcessed bool) (offset int64, metadata string) {
	if lastProcessed {
		return next - 1, LastMark
	}
	return next, NextMark
}

// Decode returns the next offset to read of a partition whose
// committed offset and metadata are offset and metadata (-1 for none),
// read by an instance in the last-processed convention or not; rewrite
// reports that the commit should be made again in the instance's own
// convention, with its mark: a commit in the other convention (so that an
// original that takes the partition later reads it right), and, in the
// last-processed convention, an unmarked one (so that an instance without
// the setting that takes the partition later reads it right too).
func Decode(offset int64, metadata string, lastProcessed bool) (next int64, rewrite bool) {
	switch {
	case metadata == LastMark && offset >= -1:
		return offset + 1, !lastProcessed
	case offset < 0:
		return -1, false
	case metadata == NextMark:
		return offset, lastProcessed
	case lastProcessed:
		return offset + 1, true
	default:
		return offset, false
	}
}
