package backup

import (
	"path/filepath"
	"testing"
)

type named string

func (n named) String() string { return string(n) }

// A snapshot's URL puts its name on the path, before the destination's
// query: verify after backup etcd --to 's3://b/p/?region=x' opens it.
func TestObjectURLPutsTheNameBeforeTheQuery(t *testing.T) {
	for _, tc := range []struct{ dest, want string }{
		{"s3://b/p/", "s3://b/p/etcd.db"},
		{"s3://b/p", "s3://b/p/etcd.db"},
		{"s3://b/p/?region=eu-west-1", "s3://b/p/etcd.db?region=eu-west-1"},
		{"file:///backups/?x=1", "file:///backups/etcd.db?x=1"},
		{"/backups", filepath.Join("/backups", "etcd.db")},
	} {
		if got := objectURL(named(tc.dest), "etcd.db"); got != tc.want {
			t.Errorf("objectURL(%q) = %q, want %q", tc.dest, got, tc.want)
		}
	}
}
