package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	etcdversion "go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"devata.dev/devata/inventory"
	"devata.dev/devata/snapshot"
)

// The results a Proof records.
const (
	ResultRestored = "restored"
	ResultFailed   = "failed"
)

// Proof is what backup verify found, recorded in the sidecar as
// "verified": when, how, what the restored etcd served, and how long it
// took; nothing of the snapshot's contents but key counts.
type Proof struct {
	Time   time.Time `json:"time"`
	Result string    `json:"result"`
	How    string    `json:"how"`
	// EtcdVersion is the version of the etcd that served the restore.
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// Revision is the revision the restored etcd served.
	Revision int64 `json:"revision,omitempty"`
	// Members is how many voting members the snapshot holds (the sidecar's
	// members); the restored etcd has one, as Talos' recovery makes it.
	Members int `json:"members,omitempty"`
	// Keys, Namespaces, Nodes and KubeSystem count what the restored etcd
	// served: every key, Kubernetes' namespaces and nodes, and the objects
	// of the kube-system namespace among the kinds a cluster always has.
	Keys            int64   `json:"keys,omitempty"`
	Namespaces      int64   `json:"namespaces,omitempty"`
	Nodes           int64   `json:"nodes,omitempty"`
	KubeSystem      int64   `json:"kubeSystem,omitempty"`
	DurationSeconds float64 `json:"durationSeconds"`
	// Error says why the proof failed.
	Error string `json:"error,omitempty"`
}

// maxSidecar bounds a sidecar read from a store: backup etcd writes about
// a kilobyte.
const maxSidecar = 1 << 20

// ErrNotRestorable is wrapped when a snapshot was checked and failed: its
// hash, its members, its restore or what the restored etcd served.
var ErrNotRestorable = errors.New("the snapshot does not restore")

// VerifyOptions say what Verify checks against and where it works.
type VerifyOptions struct {
	// Inventory, when not nil, is the cluster the snapshot must be of.
	Inventory *inventory.Inventory
	// WorkDir is where the temporary copy and the restored etcd go (a new
	// directory inside it, removed after); "" is the system's temporary
	// directory. It needs room for about twice the snapshot.
	WorkDir string
	// Log takes what is worth a log line only (nil: nowhere).
	Log *slog.Logger
	// Keys open an encrypted snapshot (its sidecar's encryption); nil
	// refuses one, naming its recipients.
	Keys Keys
}

// howEtcd is the How of a proof: the restore etcdutl does (and Talos'
// recovery, services/etcd.go recoverFromSnapshot), served by an etcd
// embedded in devata.
const howEtcd = "etcdutl snapshot restore (etcd %s) into a temporary directory as one member, as Talos' recovery does, served by an embedded etcd on 127.0.0.1"

// Verify proves that the snapshot at path restores, and records the proof
// in its sidecar (path+".json", which must exist: backup etcd wrote it).
// It copies the snapshot into a private temporary directory while
// checking its size and sha256 against the sidecar, checks the copy as
// backup etcd does (etcd's hash, the page graph, bbolt's revision and
// members) and its members against the sidecar and the inventory,
// restores it with etcd's own restore code, starts that etcd on loopback
// and reads from it: the revision must be the sidecar's, it must serve
// one member (the restored one) and Kubernetes' own keys (namespaces,
// nodes, kube-system objects). Everything it started or wrote is gone
// when it returns, on error and cancellation too.
//
// The Proof is not nil when the snapshot was checked: with an error
// wrapping ErrNotRestorable when it failed. A Proof is recorded in the
// sidecar unless ctx ended first; the error says when recording failed.
func Verify(ctx context.Context, path string, o VerifyOptions) (*Proof, error) {
	return verifyIn(ctx, dirStore{filepath.Dir(path)}, filepath.Base(path), o)
}

func verifyIn(ctx context.Context, st store, name string, o VerifyOptions) (*Proof, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	where := objectURL(st, name)
	raw, side, err := getSidecar(ctx, st, name)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	proof, err := prove(ctx, st, name, side, o)
	if proof == nil {
		return nil, err // could not check: nothing to record
	}
	proof.Time = start.UTC().Truncate(time.Second)
	proof.DurationSeconds = math.Round(time.Since(start).Seconds()*10) / 10
	if err != nil {
		proof.Result, proof.Error = ResultFailed, err.Error()
		err = fmt.Errorf("%w: %s: %w", ErrNotRestorable, where, err)
	} else {
		proof.Result = ResultRestored
	}
	if rerr := recordProof(ctx, st, name, raw, proof); rerr != nil {
		return proof, errors.Join(err, fmt.Errorf("the proof could not be recorded in %s: %w", SidecarPath(where), rerr))
	}
	return proof, err
}

// getSidecar reads name's sidecar from st, raw and decoded.
func getSidecar(ctx context.Context, st store, name string) (json.RawMessage, *Sidecar, error) {
	where := objectURL(st, SidecarPath(name))
	rc, err := st.Get(ctx, SidecarPath(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s has no sidecar %s: backup verify checks what devata backup etcd wrote (the snapshot and its sidecar); take one with devata backup etcd", objectURL(st, name), where)
	}
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxSidecar+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", where, err)
	}
	var s Sidecar
	if len(raw) > maxSidecar || json.Unmarshal(raw, &s) != nil {
		return nil, nil, fmt.Errorf("%s is not a devata sidecar (not its JSON): restore the one backup etcd wrote with the snapshot", where)
	}
	if s.Snapshot != name {
		return nil, nil, fmt.Errorf("%s describes another snapshot, not %s: restore the one backup etcd wrote with it", where, name)
	}
	return raw, &s, nil
}

// prove runs the checks and the restore; a nil Proof is a failure to
// check at all (the work directory, a cancellation), not the snapshot's.
func prove(ctx context.Context, st store, name string, side *Sidecar, o VerifyOptions) (*Proof, error) {
	proof := &Proof{How: fmt.Sprintf(howEtcd, etcdVersion()), Members: len(side.Members)}
	work, err := os.MkdirTemp(o.WorkDir, "devata-verify-") // 0700: the copy holds every Secret
	if err != nil {
		return nil, fmt.Errorf("a directory for the restore: %w; give another with --work-dir", err)
	}
	defer os.RemoveAll(work)
	failed := func(err error) (*Proof, error) {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted: %w; nothing was recorded", context.Cause(ctx))
		}
		return proof, err
	}

	// the copy: the sidecar's size and sha256, then the checks backup
	// etcd made, on a file no one else can swap under etcd's restore
	// (an encrypted one is decrypted on the way, its stored bytes and its
	// clear text each held to the sidecar)
	cp := filepath.Join(work, "snapshot.db")
	if side.Encryption != nil {
		if err := checkEncryption(objectURL(st, name), side.Encryption); err != nil {
			return nil, err
		}
	}
	stored, plain, err := copyOut(ctx, st, name, cp, side.Encryption, o.Keys)
	var local *localError
	var get *getError
	var key *decryptError
	switch {
	case errors.As(err, &get):
		return nil, get.err
	case errors.As(err, &key):
		return nil, key // the key is missing, not the snapshot: nothing to record
	case errors.As(err, &local):
		return nil, fmt.Errorf("copy %s into %s: %w; give a work directory with room (--work-dir)", name, work, local.err)
	case err != nil:
		return failed(err)
	case side.Encryption != nil:
		if err := checkDecrypted(side, stored, plain); err != nil {
			return failed(err)
		}
	case stored.size != side.Size || stored.sha256 != side.SHA256:
		return failed(fmt.Errorf("it is not the snapshot its sidecar describes (%d bytes, sha256 %s; the sidecar says %d bytes, sha256 %s): it changed since backup etcd wrote it; use another copy", stored.size, stored.sha256, side.Size, side.SHA256))
	}
	f, err := snapshot.Verify(ctx, cp)
	if err != nil {
		return failed(errors.New(strings.ReplaceAll(err.Error(), cp, name)))
	}
	voters := slices.Sorted(slices.Values(f.Voters()))
	switch {
	case side.EtcdRevision != 0 && f.Revision != side.EtcdRevision:
		return failed(fmt.Errorf("its revision is %d where its sidecar says %d: not the snapshot the sidecar describes", f.Revision, side.EtcdRevision))
	case !slices.Equal(voters, slices.Sorted(slices.Values(side.Members))):
		return failed(fmt.Errorf("it holds %d %s (%s) where its sidecar says %d (%s): not the snapshot the sidecar describes", len(voters), plural(len(voters), "member", "members"), quotedList(voters), len(side.Members), strings.Join(side.Members, ", ")))
	}
	if o.Inventory != nil {
		if err := CheckSnapshotOf(o.Inventory, f, side); err != nil {
			// CheckSnapshotOf's next step is bootstrap's; verify's is another inventory
			msg, _, _ := strings.Cut(err.Error(), "; restore a snapshot")
			return failed(fmt.Errorf("%s: it is not a backup of %s as the inventory has it; verify it with its own cluster's inventory (-i), or take a new one with devata backup etcd", msg, o.Inventory.Cluster.Name))
		}
	}
	served, err := restoreAndRead(ctx, cp, filepath.Join(work, "etcd"), o.Log)
	if served != nil {
		proof.EtcdVersion, proof.Revision, proof.Keys = served.version, served.revision, served.keys
		proof.Namespaces, proof.Nodes, proof.KubeSystem = served.namespaces, served.nodes, served.kubeSystem
	}
	if err != nil {
		return failed(err)
	}
	switch {
	case served.revision != f.Revision:
		return failed(fmt.Errorf("the restored etcd serves revision %d, the snapshot holds %d", served.revision, f.Revision))
	case served.members != 1:
		return failed(fmt.Errorf("the restored etcd serves %d members, not the one it was restored as", served.members))
	case served.namespaces == 0 || !served.kubeSystemNamespace || served.nodes == 0 || served.kubeSystem == 0:
		return failed(fmt.Errorf("the restored etcd serves no Kubernetes cluster (%d namespaces, kube-system %s, %d nodes, %d kube-system objects): this snapshot would rebuild an etcd without the cluster's objects; take a new one with devata backup etcd", served.namespaces, present(served.kubeSystemNamespace), served.nodes, served.kubeSystem))
	}
	return proof, nil
}

func present(ok bool) string {
	if ok {
		return "present"
	}
	return "missing"
}

// copyOut copies name from st to path (0600), returning its size and
// sha256 (stored and plain are the same); with enc, it decrypts on the
// way (decryptCopy) and returns the size and sha256 of what was read and
// of the clear text written. Failures writing path are localErrors.
func copyOut(ctx context.Context, st store, name, path string, enc *Encryption, keys Keys) (stored, plain written, err error) {
	rc, err := st.Get(ctx, name)
	if err != nil {
		return stored, plain, &getError{err}
	}
	defer rc.Close()
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return stored, plain, &localError{err}
	}
	defer out.Close()
	if enc != nil {
		stored, plain, err = decryptCopy(ctx, rc, out, objectURL(st, name), enc, keys)
	} else {
		h := sha256.New()
		var n int64
		n, err = io.Copy(io.MultiWriter(&errWriter{out}, h), &ctxReader{ctx: ctx, r: io.LimitReader(rc, snapshot.MaxSize+1)})
		stored = written{n, hex.EncodeToString(h.Sum(nil))}
		plain = stored
	}
	if err != nil {
		var we *writeErr
		if errors.As(err, &we) {
			return stored, plain, &localError{we.err}
		}
		return stored, plain, err
	}
	if err := out.Close(); err != nil {
		return stored, plain, &localError{err}
	}
	return stored, plain, nil
}

// getError is a snapshot that could not be opened (gone, a link): not
// checked, so nothing is recorded.
type getError struct{ err error }

func (e *getError) Error() string { return e.err.Error() }
func (e *getError) Unwrap() error { return e.err }

type writeErr struct{ err error }

func (e *writeErr) Error() string { return e.err.Error() }

// errWriter tells its write failures from the reader's.
type errWriter struct{ w io.Writer }

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		return n, &writeErr{err}
	}
	return n, nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// recordProof writes proof into name's sidecar as "verified", keeping
// every other field of raw as it is.
func recordProof(ctx context.Context, st store, name string, raw json.RawMessage, proof *Proof) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	p, err := json.Marshal(proof)
	if err != nil {
		return err
	}
	fields["verified"] = p
	// the sidecar's own order, "verified" last: read it back in order
	out, err := reorder(raw, fields)
	if err != nil {
		return err
	}
	return st.Put(ctx, SidecarPath(name), bytes.NewReader(out))
}

// reorder marshals fields in the order raw has them, new ones last,
// indented as backup etcd writes sidecars.
func reorder(raw json.RawMessage, fields map[string]json.RawMessage) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var keys []string
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		keys = append(keys, k)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	if !slices.Contains(keys, "verified") {
		keys = append(keys, "verified")
	}
	var b bytes.Buffer
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		kj, _ := json.Marshal(k)
		b.Write(kj)
		b.WriteString(":")
		b.Write(fields[k])
	}
	b.WriteString("}")
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// served is what the restored etcd answered.
type served struct {
	version             string
	revision, keys      int64
	members             int
	namespaces, nodes   int64
	kubeSystem          int64
	kubeSystemNamespace bool
}

// kubeSystemKinds are kinds every Kubernetes cluster has objects of in
// kube-system (the API server's own ConfigMaps, Roles, RoleBindings and
// identity Leases, the control plane's Pods and ServiceAccounts), as
// kube-apiserver stores them under /registry/<resource>/<namespace>/.
var kubeSystemKinds = []string{"configmaps", "roles", "rolebindings", "leases", "serviceaccounts", "pods", "services/specs"}

// servingHook, set by tests only, is called with the restored etcd's
// client address once it serves.
var servingHook func(addr string)

// restoreAndRead restores the snapshot at path into dir as etcdutl does
// and starts an etcd on it, on loopback ports, then reads from it. The
// etcd is stopped before it returns.
func restoreAndRead(ctx context.Context, path, dir string, log *slog.Logger) (*served, error) {
	logs := &tailCore{max: 4 << 10}
	lg := zap.New(logs)
	const name = "devata-verify"
	var e *embed.Etcd
	for attempt := range 3 { // a free port may be taken between picking and binding
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[0]))}
		client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[1]))}
		data := filepath.Join(dir, fmt.Sprint(attempt))
		// etcdutl's snapshot restore, as Talos' recoverFromSnapshot calls it
		// (internal/app/machined/pkg/system/services/etcd.go, v1.14.1): this
		// member alone in the initial cluster
		if err := etcdsnapshot.NewV3(lg).Restore(etcdsnapshot.RestoreConfig{
			SnapshotPath:        path,
			Name:                name,
			OutputDataDir:       data,
			PeerURLs:            []string{peer.String()},
			InitialCluster:      name + "=" + peer.String(),
			InitialClusterToken: name,
		}); err != nil {
			return nil, fmt.Errorf("etcd's restore refused it: %w%s", err, logs.tail())
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cfg := embed.NewConfig()
		cfg.Name, cfg.Dir = name, data
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.InitialCluster, cfg.InitialClusterToken = name+"="+peer.String(), name
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
		cfg.EnableGRPCGateway = false
		cfg.UnsafeNoFsync = true // a throwaway copy
		cfg.QuotaBackendBytes = 8 << 30
		e, err = embed.StartEtcd(cfg)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "address already in use") || attempt == 2 {
			return nil, fmt.Errorf("the restored etcd did not start: %w%s", err, logs.tail())
		}
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return nil, fmt.Errorf("the restored etcd failed: %w%s", err, logs.tail())
	case <-e.Server.StopNotify():
		return nil, fmt.Errorf("the restored etcd stopped before it served%s", logs.tail())
	case <-time.After(5 * time.Minute):
		return nil, fmt.Errorf("the restored etcd did not serve within 5 minutes%s", logs.tail())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if servingHook != nil {
		servingHook(e.Clients[0].Addr().String())
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{e.Clients[0].Addr().String()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop(), Context: ctx,
	})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	s, err := read(ctx, cli, e.Clients[0].Addr().String())
	if err != nil {
		return s, fmt.Errorf("reading from the restored etcd: %w%s", err, logs.tail())
	}
	log.Debug("restored etcd served", "revision", s.revision, "keys", s.keys)
	return s, nil
}

// read asks the restored etcd its version, revision, members and counts;
// values are never read (CountOnly), so no Secret leaves it.
func read(ctx context.Context, cli *clientv3.Client, endpoint string) (*served, error) {
	s := &served{}
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	s.version = st.Version
	all, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return s, err
	}
	s.revision, s.keys = all.Header.Revision, all.Count
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return s, err
	}
	s.members = len(ml.Members)
	count := func(prefix string) (int64, error) {
		r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		return r.Count, nil
	}
	if s.namespaces, err = count("/registry/namespaces/"); err != nil {
		return s, err
	}
	ks, err := count("/registry/namespaces/kube-system")
	if err != nil {
		return s, err
	}
	s.kubeSystemNamespace = ks > 0
	if s.nodes, err = count("/registry/minions/"); err != nil {
		return s, err
	}
	for _, kind := range kubeSystemKinds {
		n, err := count("/registry/" + kind + "/kube-system/")
		if err != nil {
			return s, err
		}
		s.kubeSystem += n
	}
	return s, nil
}

// freePorts are n loopback ports free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("a loopback port for the restored etcd: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// etcdVersion is the version of the etcd modules devata is built with.
func etcdVersion() string { return etcdversion.Version }

// tailCore keeps the last max bytes of etcd's warnings and errors, to say
// why a restore or a start failed; etcd logs no key values.
type tailCore struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailCore) Enabled(l zapcore.Level) bool      { return l >= zapcore.WarnLevel }
func (t *tailCore) With([]zapcore.Field) zapcore.Core { return t }
func (t *tailCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if t.Enabled(e.Level) {
		return ce.AddCore(e, t)
	}
	return ce
}

func (t *tailCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", e.Level, e.Message)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range enc.Fields {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, " %s=%v", k, enc.Fields[k])
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b.String()+"\n"...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return nil
}

func (t *tailCore) Sync() error { return nil }

func (t *tailCore) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) == 0 {
		return ""
	}
	return "\netcd said (last lines):\n" + strings.TrimRight(string(t.buf), "\n")
}
