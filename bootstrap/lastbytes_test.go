package bootstrap

import (
	"bytes"
	"testing"
)

// The upload holds the stream to the verified snapshot by its size and
// its last 32 bytes (etcd's hash), whatever the chunks.
func TestLastBytes(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 100)
	for _, chunk := range []int{1, 7, 32, 33, 1000, len(data)} {
		l := &lastBytes{keep: 32}
		for p := data; len(p) > 0; p = p[min(chunk, len(p)):] {
			l.Write(p[:min(chunk, len(p))]) //nolint:errcheck // never fails
		}
		if l.n != int64(len(data)) || !bytes.Equal(l.buf, data[len(data)-32:]) {
			t.Errorf("chunks of %d: %d bytes, last %q", chunk, l.n, l.buf)
		}
	}
}
