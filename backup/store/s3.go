package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// s3Store is a bucket and a prefix on S3 or an S3-compatible service,
// through gocloud.dev/blob (s3blob), with a client configured as the AWS
// SDK configures itself (config.LoadDefaultConfig: the environment, the
// shared config and credentials files, AWS_PROFILE, SSO, web identity).
type s3Store struct {
	display    string
	bucketName string
	prefix     string // "" or ending in "/"
	region     string
	endpoint   string // "" for AWS
	credSource string

	client      *s3.Client
	bucket      *blob.Bucket // prefixed
	partSize    int64
	concurrency int
}

// The URL's query parameters, as gocloud's s3blob and aws.V2ConfigFromURLParams name them.
var s3Params = []string{"region", "endpoint", "profile", "use_path_style", "s3ForcePathStyle"}

// s3Settings reads the s3:// URL: the key prefix (ending in a slash), and
// the region, endpoint, profile and path-style addressing, each from
// Options first, else from the URL's query. Credentials in the URL and
// unknown parameters are refused.
func s3Settings(u *url.URL, opts Options, fail func(string, ...any) error) (prefix, region, endpoint, profile string, pathStyle *bool, err error) {
	if u.User != nil {
		return "", "", "", "", nil, fail("credentials do not go in the URL (they would show in logs and process lists): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")
	}
	if u.Host == "" {
		return "", "", "", "", nil, fail("no bucket: write s3://BUCKET/PREFIX/")
	}
	q := u.Query()
	for k := range q {
		if !slices.Contains(s3Params, k) {
			return "", "", "", "", nil, fail("unknown query parameter %q (known: %s)", k, strings.Join(s3Params, ", "))
		}
	}
	prefix = strings.TrimPrefix(u.Path, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if strings.Contains(prefix, "//") {
		return "", "", "", "", nil, fail("empty path element in the prefix %q", prefix)
	}
	region = first(opts.Region, q.Get("region"))
	endpoint = first(opts.Endpoint, q.Get("endpoint"))
	profile = first(opts.Profile, q.Get("profile"))
	pathStyle = opts.UsePathStyle
	for _, k := range []string{"use_path_style", "s3ForcePathStyle"} {
		if v := q.Get(k); v != "" && pathStyle == nil {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "", "", "", "", nil, fail("?%s=%s: give true or false", k, v)
			}
			pathStyle = &b
		}
	}
	if endpoint != "" {
		if e, err := url.Parse(endpoint); err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return "", "", "", "", nil, fail("endpoint %q: give a URL such as https://s3.example.com or http://127.0.0.1:9000", redactEndpoint(endpoint))
		}
	}
	return prefix, region, endpoint, profile, pathStyle, nil
}

func openS3(ctx context.Context, u *url.URL, shown string, opts Options) (Store, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("backup destination %s: "+format, append([]any{shown}, args...)...)
	}
	prefix, region, endpoint, profile, pathStyle, err := s3Settings(u, opts, fail)
	if err != nil {
		return nil, err
	}

	var load []func(*config.LoadOptions) error
	if region != "" {
		load = append(load, config.WithRegion(region))
	}
	if profile != "" {
		load = append(load, config.WithSharedConfigProfile(profile))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fail("the AWS configuration: %w: check AWS_PROFILE, AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE", scrubErr(err, os.Getenv("AWS_SECRET_ACCESS_KEY")))
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	s := &s3Store{
		display:     shown,
		bucketName:  u.Host,
		prefix:      prefix,
		region:      cfg.Region,
		credSource:  credSource(profile),
		partSize:    opts.PartSize,
		concurrency: opts.Concurrency,
	}
	if s.partSize <= 0 {
		s.partSize = DefaultPartSize
	}
	if s.partSize < 5<<20 {
		return nil, fail("part size %d: S3 needs at least 5 MiB per part", s.partSize)
	}
	if s.concurrency <= 0 {
		s.concurrency = DefaultConcurrency
	}
	s.client = s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		// BaseEndpoint holds AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the
		// shared config's endpoint_url here, when one is set.
		if o.BaseEndpoint != nil {
			s.endpoint = *o.BaseEndpoint
		}
		switch {
		case pathStyle != nil:
			o.UsePathStyle = *pathStyle
		case s.endpoint != "" && literalHost(s.endpoint):
			o.UsePathStyle = true
		}
		// S3-compatible services differ in the checksums they accept; the
		// SDK's default (a CRC on every request, since 2025) is for AWS.
		// AWS_REQUEST_CHECKSUM_CALCULATION=when_supported restores it.
		if s.endpoint != "" && os.Getenv("AWS_REQUEST_CHECKSUM_CALCULATION") == "" {
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	})
	checksums := cfg.RequestChecksumCalculation
	if s.endpoint != "" && os.Getenv("AWS_REQUEST_CHECKSUM_CALCULATION") == "" {
		checksums = aws.RequestChecksumCalculationWhenRequired
	}
	b, err := s3blob.OpenBucket(ctx, s.client, s.bucketName, &s3blob.Options{RequestChecksumCalculation: checksums})
	if err != nil {
		return nil, fail("%w", scrubErr(err))
	}
	s.bucket = blob.PrefixedBucket(b, prefix)
	return s, nil
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// literalHost says whether endpoint's host is an IP address or localhost,
// where a bucket cannot be a subdomain: path-style addressing.
func literalHost(endpoint string) bool {
	e, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	h := e.Hostname()
	return h == "localhost" || strings.HasSuffix(h, ".localhost") || net.ParseIP(h) != nil
}

func redactEndpoint(e string) string { return displayURL(e) }

// credSource says where the SDK looks for credentials first, for errors:
// never the credentials themselves.
func credSource(profile string) string {
	switch {
	case os.Getenv("AWS_ACCESS_KEY_ID") != "":
		return "AWS_ACCESS_KEY_ID from the environment"
	case profile != "":
		return "profile " + profile
	case os.Getenv("AWS_PROFILE") != "":
		return "profile " + os.Getenv("AWS_PROFILE") + " (AWS_PROFILE)"
	}
	return "the default profile of the shared credentials file, else the instance's role"
}

func (s *s3Store) String() string { return s.display }
func (s *s3Store) Close() error   { return s.bucket.Close() }

func (s *s3Store) endpointShown() string {
	if s.endpoint == "" {
		return "AWS"
	}
	return redactEndpoint(s.endpoint)
}

// secrets are the credential values an error's text must never carry.
func (s *s3Store) secrets() []string {
	return []string{os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN")}
}

// Put streams r to the bucket through the SDK's transfer manager: one
// PutObject for what fits in one part, else a multipart upload of
// PartSize parts, Concurrency at a time, which the transfer manager aborts
// when a part fails. A canceled ctx or a reader's error ends the upload
// before it completes; Put then aborts, with a context of its own, any
// multipart upload of this key that it started and that is still there.
func (s *s3Store) Put(ctx context.Context, name string, r io.Reader) (Written, error) {
	if err := checkName(s, name); err != nil {
		return Written{}, err
	}
	h := sha256.New()
	cr := &countReader{r: ctxReader{ctx, r}}
	start := time.Now()
	err := s.bucket.Upload(ctx, name, io.TeeReader(cr, h), &blob.WriterOptions{
		ContentType:    "application/octet-stream",
		BufferSize:     int(s.partSize),
		MaxConcurrency: s.concurrency,
	})
	// An upload that completed stays, even if ctx ended just after: it is
	// whole, and an error here would say it is not there.
	if err != nil {
		if cr.err != nil && !errors.Is(err, cr.err) {
			err = fmt.Errorf("%w (reading the source: %w)", err, cr.err)
		}
		s.abortUploads(ctx, name, start)
		return Written{}, s.wrap("put "+name, err)
	}
	return Written{Size: cr.n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// abortUploads aborts the incomplete multipart uploads of name started
// since start (less a minute for clocks that differ), so that an
// interrupted Put leaves no parts behind to pay for. Best effort: S3
// never shows them to a reader.
func (s *s3Store) abortUploads(ctx context.Context, name string, start time.Time) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	key := s.prefix + name
	out, err := s.client.ListMultipartUploads(actx, &s3.ListMultipartUploadsInput{Bucket: aws.String(s.bucketName), Prefix: aws.String(key)})
	if err != nil {
		return
	}
	for _, u := range out.Uploads {
		if aws.ToString(u.Key) != key || (u.Initiated != nil && u.Initiated.Before(start.Add(-time.Minute))) {
			continue
		}
		_, _ = s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: aws.String(s.bucketName), Key: u.Key, UploadId: u.UploadId})
	}
}

type countReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}

func (s *s3Store) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := checkName(s, name); err != nil {
		return nil, err
	}
	r, err := s.bucket.NewReader(ctx, name, nil)
	if err != nil {
		return nil, s.wrap("get "+name, err)
	}
	return &s3Reader{r: r, s: s, name: name}, nil
}

// s3Reader names the store in an error met while reading.
type s3Reader struct {
	r    *blob.Reader
	s    *s3Store
	name string
}

func (r *s3Reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = r.s.wrap("get "+r.name, err)
	}
	return n, err
}

func (r *s3Reader) Close() error { return r.r.Close() }

func (s *s3Store) List(ctx context.Context) ([]Object, error) {
	var out []Object
	it := s.bucket.List(&blob.ListOptions{Delimiter: "/"})
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, s.wrap("list", err)
		}
		if o.IsDir || strings.HasPrefix(o.Key, ".") {
			continue
		}
		out = append(out, Object{Name: o.Key, Size: o.Size, ModTime: o.ModTime.UTC()})
	}
	// A missing bucket lists as empty on some services: ask once.
	if len(out) == 0 {
		if _, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucketName)}); err != nil {
			return nil, s.wrapBucket("list", err)
		}
	}
	slices.SortFunc(out, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Delete removes name. S3's DeleteObject succeeds on a missing key, so
// Delete asks first, to report ErrNotFound as the directory store does.
func (s *s3Store) Delete(ctx context.Context, name string) error {
	if err := checkName(s, name); err != nil {
		return err
	}
	if _, err := s.bucket.Attributes(ctx, name); err != nil {
		return s.wrap("delete "+name, err)
	}
	if err := s.bucket.Delete(ctx, name); err != nil {
		return s.wrap("delete "+name, err)
	}
	return nil
}
