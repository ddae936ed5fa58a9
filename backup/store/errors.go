package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"devata.dev/devata/redact"
)

// displayURL is rawURL as errors show it: userinfo and credential query
// parameters replaced (redact.Credentials).
func displayURL(rawURL string) string {
	return redact.Credentials(rawURL)
}

// scrubbed keeps an error's chain (errors.Is, errors.As) and shows its text
// with URL credentials and the given secrets replaced.
type scrubbed struct {
	msg string
	err error
}

func (s *scrubbed) Error() string { return s.msg }
func (s *scrubbed) Unwrap() error { return s.err }

func scrubErr(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := redact.Credentials(err.Error())
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, redact.Redacted)
		}
	}
	return &scrubbed{msg: msg, err: err}
}

// opError is a failed operation on a destination: which, what, the kind of
// failure (one of the Err* sentinels, or nil), the cause and what to do.
type opError struct {
	store string // the URL, without credentials
	op    string // "put etcd.db", "list"
	kind  error
	err   error
	hint  string
}

func (e *opError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backup store %s: %s: ", e.store, e.op)
	if e.kind != nil {
		b.WriteString(e.kind.Error())
		b.WriteString(": ")
	}
	b.WriteString(e.err.Error())
	if e.hint != "" {
		b.WriteString(": ")
		b.WriteString(e.hint)
	}
	return b.String()
}

func (e *opError) Unwrap() []error {
	if e.kind == nil {
		return []error{e.err}
	}
	return []error{e.kind, e.err}
}

// s3Error classifies an error from S3 (through gocloud or the SDK) and says
// what to do next. The codes are S3's (the REST API's error responses);
// AWS and the compatible servers share them.
func (s *s3Store) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	e := &opError{store: s.display, op: op, err: scrubErr(err, s.secrets()...)}
	var ae smithy.APIError
	var re *awshttp.ResponseError
	code, status := "", 0
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		e.hint = "interrupted; nothing was left under the name"
	case code == "NoSuchBucket":
		e.kind = ErrNoBucket
		e.hint = fmt.Sprintf("create bucket %q (aws s3 mb s3://%s) or correct the URL; check the endpoint (%s) and region (%s) too", s.bucketName, s.bucketName, s.endpointShown(), s.region)
	case code == "NoSuchKey" || code == "NotFound" || (status == http.StatusNotFound && code == ""):
		e.kind = ErrNotFound
		e.hint = "list what is there with devata backup list " + s.display
	// versitygw answers an unknown key with XAdminUserNotFound (and a 404)
	// where AWS says InvalidAccessKeyId.
	case code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "InvalidToken" || code == "ExpiredToken" || code == "XAdminUserNotFound" ||
		code == "AccessDenied" || code == "Forbidden" || status == http.StatusForbidden || status == http.StatusUnauthorized:
		e.kind = ErrDenied
		e.hint = fmt.Sprintf("check the credentials (%s) and that they may use bucket %q: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE and the shared credentials file", s.credSource, s.bucketName)
	case isUnreachable(err):
		e.kind = ErrUnreachable
		e.hint = fmt.Sprintf("is the S3 endpoint %s up and reachable? set it with AWS_ENDPOINT_URL_S3, ?endpoint= or devata's settings", s.endpointShown())
	}
	return e
}

// wrapBucket is wrap for a request about the bucket itself (HeadBucket),
// whose 404 carries no code: the bucket is missing.
func (s *s3Store) wrapBucket(op string, err error) error {
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		e := s.wrap(op, err).(*opError)
		e.kind = ErrNoBucket
		e.hint = fmt.Sprintf("create bucket %q (aws s3 mb s3://%s) or correct the URL; check the endpoint (%s) and region (%s) too", s.bucketName, s.bucketName, s.endpointShown(), s.region)
		return e
	}
	return s.wrap(op, err)
}

// isUnreachable says whether err is a failure to reach the endpoint at
// all: refused, no route, no such host, timed out while dialing.
func isUnreachable(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.As(err, &dnsErr):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ECONNRESET):
		return true
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return true
	}
	return false
}
