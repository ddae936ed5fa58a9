package talosapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/inventory"
)

// SnapshotInfo is what EtcdSnapshot learned of the snapshot it streamed.
type SnapshotInfo struct {
	// Machine is the control plane it came from; TalosVersion what that
	// machine reports, empty when the talosconfig's role may not ask
	// (os:etcd:backup alone).
	Machine      string
	TalosVersion string
	// Size counts every byte written, etcd's trailing sha256 included;
	// SHA256 is the hex sha256 of them all, what `sha256sum FILE` prints.
	Size   int64
	SHA256 string
}

// ErrSnapshotInvalid is wrapped by EtcdSnapshot when the stream ended but
// is not a whole etcd snapshot: cut short, or its hash does not match.
var ErrSnapshotInvalid = errors.New("not a whole etcd snapshot")

// ErrSnapshotNotAuthorized is wrapped by EtcdSnapshot when Talos refused
// the talosconfig's role: every control plane refuses it alike.
var ErrSnapshotNotAuthorized = errors.New("the talosconfig's role may not take etcd snapshots")

// snapshotRoles are the roles Talos lets take an etcd snapshot
// (services/machined.go rules, v1.11.0 to v1.14.1); the first is the least.
const snapshotRoles = "os:etcd:backup (or os:operator, os:admin)"

// EtcdSnapshot streams an etcd snapshot from the control plane m into w and
// verifies it as etcdutl's restore does (etcdutl/snapshot/
// v3_snapshot.go): etcd appends the sha256 of its database, so the size must
// be a multiple of 512 plus 32 and those last 32 bytes the hash of the rest.
// It calls no more than os:etcd:backup may: the Version it records is asked
// only when the talosconfig's role may read it.
//
// It reads the raw MachineService stream rather than client.EtcdSnapshot:
// the client's reader ends quietly on DeadlineExceeded or Canceled, and
// machined's own chunker ends a stream with status OK when its read from
// etcd breaks off (pkg/chunker/stream), so only the size and the hash tell
// a whole snapshot from a part. w holds what arrived even when it fails; the
// caller throws it away.
func EtcdSnapshot(ctx context.Context, d *Dialer, m *inventory.Machine, w io.Writer) (SnapshotInfo, error) {
	info := SnapshotInfo{Machine: m.Name}
	fail := func(format string, args ...any) (SnapshotInfo, error) {
		return info, fmt.Errorf("etcd snapshot from %s: "+format, append([]any{m.Name}, args...)...)
	}
	if !m.IsControlPlane() {
		return fail("%s is a worker: etcd runs on control planes only; back up from one of them", m.Name)
	}
	c, err := d.Client(ctx, m)
	if err != nil {
		return fail("dial %s: %w", d.Endpoint(m), err)
	}
	defer c.Close()
	if d.mayRead() {
		v, err := c.Version(ctx)
		switch {
		case err == nil && len(v.GetMessages()) > 0:
			info.TalosVersion = v.GetMessages()[0].GetVersion().GetTag()
		case err == nil, client.StatusCode(err) == codes.PermissionDenied && !IsNoForwarding(err):
			// the version is only recorded: a role that may not ask still backs up
		default:
			return fail("%w%s", PlainError(err), snapshotHint(err))
		}
	}
	stream, err := c.MachineClient.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	if err != nil {
		return fail("%w", refused(d, err))
	}
	v := newSnapshotVerifier()
	out := io.MultiWriter(w, v)
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			info.Size = v.size
			if v.size > 0 {
				return fail("after %d bytes: %w", v.size, refused(d, err))
			}
			return fail("%w", refused(d, err))
		}
		if md := msg.GetMetadata(); md.GetError() != "" {
			return fail("after %d bytes: %s", v.size, md.GetError())
		}
		if _, err := out.Write(msg.GetBytes()); err != nil {
			info.Size = v.size
			return fail("write: %w", err)
		}
	}
	info.Size, info.SHA256 = v.size, hex.EncodeToString(v.all.Sum(nil))
	if err := v.verify(); err != nil {
		return fail("%w: %w; etcd itself may well be fine: take the snapshot again", ErrSnapshotInvalid, err)
	}
	return info, nil
}

// refused is a failed snapshot call's error for people: a refusal of the
// role wraps ErrSnapshotNotAuthorized and names the roles that may.
func refused(d *Dialer, err error) error {
	if client.StatusCode(err) == codes.PermissionDenied && !IsNoForwarding(err) {
		return fmt.Errorf("%w: %w (the certificate's roles: %s); Talos lets %s take them: make a talosconfig for backups with talosctl config new --roles os:etcd:backup FILE (with an os:admin talosconfig) and pass it with --talosconfig",
			ErrSnapshotNotAuthorized, PlainError(err), d.RolesString(), snapshotRoles)
	}
	return fmt.Errorf("%w%s", PlainError(err), snapshotHint(err))
}

// snapshotHint says what to do about a failed snapshot call, by its gRPC
// code as machined and its etcd client answer.
func snapshotHint(err error) string {
	switch client.StatusCode(err) {
	case codes.Unimplemented:
		return " (etcd snapshots are served by control planes only, and not in maintenance mode)"
	case codes.PermissionDenied:
		return " (the endpoint is a worker, whose Talos API answers only for itself: give control planes as endpoints)"
	case codes.DeadlineExceeded, codes.Unknown:
		// machined's etcd client waits for a local etcd that does not run,
		// or has no certificate yet right after a boot
		return " (etcd on this control plane does not answer: see devata drift --checks etcd, or try another control plane)"
	case codes.Unavailable:
		return " (the machine did not answer: is it up, and its address right?)"
	}
	return ""
}

// snapshotVerifier hashes everything it is given, and separately all but the
// last sha256.Size bytes: at the end those are etcd's hash of the rest.
type snapshotVerifier struct {
	all, db hash.Hash
	tail    []byte
	size    int64
}

func newSnapshotVerifier() *snapshotVerifier {
	return &snapshotVerifier{all: sha256.New(), db: sha256.New(), tail: make([]byte, 0, 2*sha256.Size)}
}

func (v *snapshotVerifier) Write(p []byte) (int, error) {
	v.size += int64(len(p))
	v.all.Write(p) //nolint:errcheck // hashes never fail
	if len(p) >= sha256.Size {
		v.db.Write(v.tail)                 //nolint:errcheck // idem
		v.db.Write(p[:len(p)-sha256.Size]) //nolint:errcheck // idem
		v.tail = append(v.tail[:0], p[len(p)-sha256.Size:]...)
		return len(p), nil
	}
	v.tail = append(v.tail, p...)
	if n := len(v.tail) - sha256.Size; n > 0 {
		v.db.Write(v.tail[:n]) //nolint:errcheck // idem
		v.tail = append(v.tail[:0], v.tail[n:]...)
	}
	return len(p), nil
}

func (v *snapshotVerifier) verify() error {
	switch {
	case v.size == 0:
		return errors.New("the stream was empty")
	case v.size%512 != sha256.Size:
		return fmt.Errorf("%d bytes is not an etcd snapshot's size (a multiple of 512 plus etcd's 32-byte sha256): the stream ended early", v.size)
	case !bytes.Equal(v.db.Sum(nil), v.tail):
		return fmt.Errorf("the sha256 etcd appended does not match the %d bytes before it: the snapshot was corrupted on its way", v.size-sha256.Size)
	}
	return nil
}
