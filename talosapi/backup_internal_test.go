package talosapi

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"
)

// machined's chunks come as the pipe from etcd's client hands them over,
// of any size: the verifier's answer must not depend on where they split.
func TestSnapshotVerifierChunking(t *testing.T) {
	db := bytes.Repeat([]byte("etcd"), 1024) // 4096 bytes
	sum := sha256.Sum256(db)
	file := append(bytes.Clone(db), sum[:]...)
	bad := bytes.Clone(file)
	bad[100] ^= 1
	for _, chunk := range []int{1, 7, 31, 32, 33, 1000, 1024, len(file)} {
		for _, tc := range []struct {
			data []byte
			want string
		}{
			{file, ""},
			{bad, "does not match"},
			{file[:len(file)-1], "ended early"},
			{nil, "empty"},
		} {
			v := newSnapshotVerifier()
			for p := tc.data; len(p) > 0; p = p[min(chunk, len(p)):] {
				v.Write(p[:min(chunk, len(p))]) //nolint:errcheck // never fails
			}
			err := v.verify()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("chunks of %d, %d bytes: %v, want %q", chunk, len(tc.data), err, tc.want)
			}
		}
	}
}
