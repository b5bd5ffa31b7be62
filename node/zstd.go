package node

import (
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/encoding"
)

// Zstd is the name of the zstd gRPC compressor (klauspost/compress) every
// node registers. Control-plane streams (Watch, Route) may ask for it with
// grpc.UseCompressor(node.Zstd); a server decodes and answers in kind.
const Zstd = "zstd"

// zstdMaxWindow bounds the memory a zstd stream may make a decoder use.
const zstdMaxWindow = 8 << 20

// gRPC's compressor registry is process-global and documented to be filled
// from init; registering the same name twice would replace it, so it is
// done here, once.
func init() { encoding.RegisterCompressor(&zstdCompressor{}) }

// zstdCompressor implements encoding.Compressor with pooled encoders and
// decoders (both are expensive to create).
type zstdCompressor struct {
	encoders sync.Pool // *zstd.Encoder
	decoders sync.Pool // *zstd.Decoder
}

func (c *zstdCompressor) Name() string { return Zstd }

func (c *zstdCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	enc, _ := c.encoders.Get().(*zstd.Encoder)
	if enc == nil {
		var err error
		enc, err = zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithWindowSize(1<<20))
		if err != nil {
			return nil, err
		}
	} else {
		enc.Reset(w)
	}
	return &zstdWriter{enc: enc, pool: &c.encoders}, nil
}

type zstdWriter struct {
	enc  *zstd.Encoder
	pool *sync.Pool
}

func (w *zstdWriter) Write(p []byte) (int, error) { return w.enc.Write(p) }

func (w *zstdWriter) Close() error {
	err := w.enc.Close()
	w.pool.Put(w.enc)
	w.enc = nil
	return err
}

func (c *zstdCompressor) Decompress(r io.Reader) (io.Reader, error) {
	dec, _ := c.decoders.Get().(*zstd.Decoder)
	if dec == nil {
		var err error
		dec, err = zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdMaxWindow),
			zstd.WithDecoderMaxMemory(64<<20))
		if err != nil {
			return nil, err
		}
	} else if err := dec.Reset(r); err != nil {
		return nil, err
	}
	return &zstdReader{dec: dec, pool: &c.decoders}, nil
}

// zstdReader returns its decoder to the pool at the end of the stream.
type zstdReader struct {
	dec  *zstd.Decoder
	pool *sync.Pool
}

func (r *zstdReader) Read(p []byte) (int, error) {
	if r.dec == nil {
		return 0, io.EOF
	}
	n, err := r.dec.Read(p)
	if err == io.EOF {
		r.pool.Put(r.dec)
		r.dec = nil
	}
	return n, err
}
