// Package store keeps backup objects at a destination named by a URL: an S3
// bucket and prefix (s3://bucket/prefix/, any S3-compatible service, through
// gocloud.dev/blob's s3blob and the AWS SDK's standard configuration) or a
// local directory (file:///abs/dir/ or a plain path). It moves bytes and
// lists names; what a snapshot or a sidecar holds is package backup's.
//
// # Atomic for readers
//
// Put streams with bounded memory and is atomic: until it returns nil,
// nothing under name is listed or read, and a failed or interrupted Put
// (an error from the reader, a canceled context, an endpoint that goes
// away) leaves nothing under name. In a directory, Put writes a hidden
// temporary file (".NAME.RANDOM.tmp", 0600, never through a symbolic link),
// syncs it and renames it over name; List never returns hidden names. On S3,
// an object larger than one part is a multipart upload, which S3 shows to no
// reader until CompleteMultipartUpload; on an error or cancellation the
// upload is aborted (and a process killed outright leaves only an
// incomplete upload, invisible to List, which a bucket lifecycle rule
// AbortIncompleteMultipartUpload removes).
//
// # A snapshot and its sidecar become visible together
//
// Two objects cannot be made visible in one step on S3, so the rule is
// about order and about what counts: a snapshot NAME counts only once its
// sidecar NAME.json exists. PutSnapshot writes the snapshot first and the
// sidecar last (with the size and SHA-256 of what was written), and
// DeleteSnapshot removes the sidecar first; Snapshots and Latest return
// only pairs whose both halves are listed. A snapshot whose sidecar never
// came (a run interrupted between the two) is never picked; Orphans lists
// it for a prune to remove.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// Object is one listed object.
type Object struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
}

// Written is what Put stored: its size and SHA-256, computed from the bytes
// as they were sent, so that a caller can record them (in a sidecar) and
// compare them with what Get returns later.
type Written struct {
	Size   int64
	SHA256 string // lower-case hex, as sha256sum prints it
}

// Store is one destination: a directory, or a bucket and a prefix.
// Names are single path elements (no slash), not hidden (no leading dot).
type Store interface {
	// Put stores r under name, replacing what is there (see the package
	// doc: atomic for readers, bounded memory).
	Put(ctx context.Context, name string, r io.Reader) (Written, error)
	// Get returns the object's content as it is now. An error that
	// matches ErrNotFound when there is none.
	Get(ctx context.Context, name string) (io.ReadCloser, error)
	// List returns the objects at the destination, sorted by name.
	List(ctx context.Context) ([]Object, error)
	// Delete removes name; an error that matches ErrNotFound when there
	// is none.
	Delete(ctx context.Context, name string) error
	// String is the destination's URL without credentials.
	String() string
	Close() error
}

// Options are the settings that the URL does not carry (devata's settings
// and flags). Zero values take the URL's query, then the AWS SDK's
// environment and shared configuration, then the defaults below.
type Options struct {
	// Region of the bucket; else ?region=, else AWS_REGION and the shared
	// config's region, else DefaultRegion.
	Region string
	// Endpoint of an S3-compatible service (https://minio.example:9000);
	// else ?endpoint=, else AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the
	// shared config's endpoint_url, else AWS.
	Endpoint string
	// Profile in the shared config and credentials files; else ?profile=,
	// else AWS_PROFILE, else "default".
	Profile string
	// UsePathStyle addresses buckets as ENDPOINT/BUCKET rather than
	// BUCKET.ENDPOINT. Nil: ?use_path_style= when given, else path style
	// when the endpoint's host is an IP address or localhost (a bucket
	// name cannot be a subdomain there).
	UsePathStyle *bool
	// PartSize is the size of one part of a multipart upload; Put holds at
	// most (Concurrency+1) parts in memory. Default DefaultPartSize; S3
	// allows 10,000 parts, so the largest object is 10,000 × PartSize.
	PartSize int64
	// Concurrency is how many parts are sent at once; default 2.
	Concurrency int
	// CreateDir creates a local directory (0700, its parents too) when it
	// does not exist; without it, Open refuses a missing directory.
	CreateDir bool
}

// Defaults.
const (
	DefaultRegion      = "us-east-1"
	DefaultPartSize    = 16 << 20
	DefaultConcurrency = 2
)

// The kinds of failure, for errors.Is. Every error this package returns
// names the destination's URL and says what to do next.
var (
	ErrNotFound     = errors.New("object not found")
	ErrNoBucket     = errors.New("bucket not found")
	ErrDenied       = errors.New("access denied")
	ErrUnreachable  = errors.New("endpoint unreachable")
	ErrInvalidName  = errors.New("invalid object name")
	ErrNotSupported = errors.New("destination not supported")
)

// Open returns the Store that rawURL names: s3://bucket/prefix/,
// file:///abs/dir/ or a plain path of a directory. It checks the URL and
// the configuration, not the destination: the first call reports an
// endpoint that is down, a missing bucket or wrong credentials.
func Open(ctx context.Context, rawURL string, opts Options) (Store, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("backup destination: empty: give s3://bucket/prefix/, file:///dir/ or a directory")
	}
	if !strings.Contains(rawURL, "://") {
		return openDir(rawURL, rawURL, opts)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("backup destination %s: %w", displayURL(rawURL), scrubErr(err))
	}
	shown := displayURL(rawURL)
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("backup destination %s: a file URL names an absolute path, file:///%s/%s: write three slashes", shown, u.Host, strings.TrimPrefix(u.Path, "/"))
		}
		if u.RawQuery != "" {
			return nil, fmt.Errorf("backup destination %s: a file URL takes no query", shown)
		}
		return openDir(filepath.FromSlash(u.Path), shown, opts)
	case "s3":
		return openS3(ctx, u, shown, opts)
	}
	return nil, fmt.Errorf("backup destination %s: %w: scheme %q: use s3://bucket/prefix/, file:///dir/ or a directory", shown, ErrNotSupported, u.Scheme)
}

// Split divides what -o names into the destination and an object name: a
// URL or path ending in a slash (or a local directory) is a destination
// and name is empty; otherwise its last element is the object's name.
// Split("s3://b/p/etcd.db") is ("s3://b/p/", "etcd.db").
func Split(out string) (dest, name string) {
	base, query, _ := strings.Cut(out, "?")
	if strings.HasSuffix(base, "/") {
		return out, ""
	}
	i := strings.LastIndex(base, "/")
	if strings.Contains(base, "://") && i < strings.Index(base, "://")+3 {
		return out, "" // s3://bucket: the bucket itself
	}
	dest = base[:i+1]
	if i < 0 {
		dest = "./"
	}
	if query != "" {
		dest += "?" + query
	}
	return dest, base[i+1:]
}

// checkName refuses what is not a plain object name.
func checkName(store fmt.Stringer, name string) error {
	switch {
	case name == "", name == ".", name == "..":
		return fmt.Errorf("%s: %w %q: give a file name", store, ErrInvalidName, name)
	case strings.ContainsAny(name, "/\\\x00"):
		return fmt.Errorf("%s: %w %q: a name is one path element, without a slash", store, ErrInvalidName, name)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("%s: %w %q: names starting with a dot are kept for uploads in progress", store, ErrInvalidName, name)
	case len(name) > 255:
		return fmt.Errorf("%s: %w: longer than 255 bytes", store, ErrInvalidName)
	}
	return nil
}

// ctxReader ends a copy when ctx is done, so that a canceled Put stops
// reading and never completes.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
