package fetch

// Decompression of a batch's records or a wrapper message's value, by
// maintained decompressors (klauspost/compress for gzip, snappy and zstd;
// pierrec/lz4), their readers pooled. The output is a new buffer each
// time: the messages decoded from it alias it.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// The codecs of a batch's attributes.
const (
	codecGzip   = 1
	codecSnappy = 2
	codecLZ4    = 3
	codecZstd   = 4
)

// decompress returns the decompressed in, of the given codec, for a batch
// or message of the given magic.
func decompress(codec int8, in []byte, magic byte) ([]byte, error) {
	switch codec {
	case codecGzip:
		return gunzip(in)
	case codecSnappy:
		return unsnappy(in)
	case codecLZ4:
		return unlz4(in, magic == 0)
	case codecZstd:
		return unzstd(in)
	}
	return nil, fmt.Errorf("unknown compression codec %d", codec)
}

// pooledReader is a pooled decompressor with the bytes.Reader it reads.
type pooledReader[R any] struct {
	src bytes.Reader
	r   R
}

var gzipReaders sync.Pool // of *pooledReader[*gzip.Reader]

func gunzip(in []byte) ([]byte, error) {
	pr, _ := gzipReaders.Get().(*pooledReader[*gzip.Reader])
	if pr == nil {
		pr = &pooledReader[*gzip.Reader]{r: new(gzip.Reader)}
	}
	defer gzipReaders.Put(pr)
	pr.src.Reset(in)
	if err := pr.r.Reset(&pr.src); err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	out, err := readAll(pr.r, 4*len(in))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return out, nil
}

var lz4Readers sync.Pool // of *pooledReader[*lz4.Reader]

// unlz4 decompresses an LZ4 frame. Kafka wrote the frame descriptor's
// checksum of magic 0 messages over the wrong bytes (KAFKA-3160), and
// its consumer ignores it there: brokenHeader replaces it with the right
// one, in a copy of the header.
func unlz4(in []byte, brokenHeader bool) ([]byte, error) {
	pr, _ := lz4Readers.Get().(*pooledReader[*lz4.Reader])
	if pr == nil {
		pr = &pooledReader[*lz4.Reader]{r: lz4.NewReader(nil)}
	}
	defer lz4Readers.Put(pr)
	var src io.Reader = &pr.src
	if brokenHeader {
		if header, ok := fixLZ4Header(in); ok {
			pr.src.Reset(in[len(header):])
			src = io.MultiReader(bytes.NewReader(header), &pr.src)
		} else {
			pr.src.Reset(in)
		}
	} else {
		pr.src.Reset(in)
	}
	pr.r.Reset(src)
	out, err := readAll(pr.r, 4*len(in))
	if err != nil {
		return nil, fmt.Errorf("lz4: %w", err)
	}
	return out, nil
}

// fixLZ4Header returns a copy of the LZ4 frame header at the start of in
// (magic, descriptor, checksum) with the descriptor's checksum computed
// as the format says: the second byte of the XXH32 of the descriptor.
func fixLZ4Header(in []byte) ([]byte, bool) {
	const magic = 0x184D2204
	if len(in) < 7 || binary.LittleEndian.Uint32(in) != magic {
		return nil, false
	}
	n := 7 // magic, flags, block descriptor, checksum
	if in[4]&0x08 != 0 {
		n += 8 // content size
	}
	if in[4]&0x01 != 0 {
		n += 4 // dictionary ID
	}
	if len(in) < n {
		return nil, false
	}
	header := bytes.Clone(in[:n])
	header[n-1] = byte(xxh32(header[4:n-1]) >> 8)
	return header, true
}

// xxh32 is XXH32 with seed 0 of b, shorter than 16 bytes (an LZ4 frame
// descriptor).
func xxh32(b []byte) uint32 {
	const (
		prime1 = 2654435761
		prime2 = 2246822519
		prime3 = 3266489917
		prime4 = 668265263
		prime5 = 374761393
	)
	h := uint32(prime5) + uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		h += binary.LittleEndian.Uint32(b) * prime3
		h = bits.RotateLeft32(h, 17) * prime4
	}
	for _, c := range b {
		h += uint32(c) * prime5
		h = bits.RotateLeft32(h, 11) * prime1
	}
	h ^= h >> 15
	h *= prime2
	h ^= h >> 13
	h *= prime3
	h ^= h >> 16
	return h
}

// xerialHeader begins snappy data in the framing of the xerial library,
// which Kafka's Java clients write: the header, a version and a
// compatible version (int32 each), then blocks, each after its length
// (int32).
var xerialHeader = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// unsnappy decompresses a raw snappy block, or xerial-framed blocks.
func unsnappy(in []byte) ([]byte, error) {
	if !bytes.HasPrefix(in, xerialHeader) {
		out, err := snappy.Decode(nil, in)
		if err != nil {
			return nil, fmt.Errorf("snappy: %w", err)
		}
		return out, nil
	}
	if len(in) < 16 {
		return nil, errors.New("snappy: xerial header cut short")
	}
	// The size of every block first, so that one buffer holds them.
	total := 0
	for b := in[16:]; len(b) > 0; {
		block, rest, err := xerialBlock(b)
		if err != nil {
			return nil, err
		}
		n, err := snappy.DecodedLen(block)
		if err != nil {
			return nil, fmt.Errorf("snappy: %w", err)
		}
		total += n
		b = rest
	}
	out := make([]byte, total)
	at := 0
	for b := in[16:]; len(b) > 0; {
		block, rest, _ := xerialBlock(b)
		d, err := snappy.Decode(out[at:], block)
		if err != nil {
			return nil, fmt.Errorf("snappy: %w", err)
		}
		at += len(d)
		b = rest
	}
	return out[:at:at], nil
}

// xerialBlock returns the first block of b and the rest of b.
func xerialBlock(b []byte) (block, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, errors.New("snappy: xerial block length cut short")
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	if n < 0 || len(b)-4 < n {
		return nil, nil, errors.New("snappy: xerial block cut short")
	}
	return b[4 : 4+n], b[4+n:], nil
}

var zstdDecoders sync.Pool // of *zstd.Decoder

// unzstd decompresses zstd frames. The pooled decoders decode on the
// caller's goroutine (DecodeAll, concurrency 1): they start none.
func unzstd(in []byte) ([]byte, error) {
	dec, _ := zstdDecoders.Get().(*zstd.Decoder)
	if dec == nil {
		var err error
		if dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1)); err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
	}
	defer zstdDecoders.Put(dec)
	out, err := dec.DecodeAll(in, make([]byte, 0, 4*len(in)))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	return out, nil
}

// readAll reads r to its end into a new buffer of capacity size at first.
func readAll(r io.Reader, size int) ([]byte, error) {
	out := make([]byte, 0, max(size, 512))
	for {
		n, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		switch {
		case errors.Is(err, io.EOF):
			return out, nil
		case err != nil:
			return nil, err
		case len(out) == cap(out):
			out = append(out, 0)[:len(out)]
		}
	}
}
