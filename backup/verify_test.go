package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"devata.dev/devata/internal/snapshottest"
	"devata.dev/devata/inventory"
)

// etcdWith starts a real one-member etcd named member in a temporary
// directory, writes keys into it and returns its snapshot as etcd streams
// it (the database and its sha256, clientv3's Maintenance.Snapshot, what
// Talos' EtcdSnapshot relays) and the revision.
func etcdWith(t *testing.T, member string, keys []string) ([]byte, int64) {
	t.Helper()
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	peer, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[0]))
	client, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = member, filepath.Join(t.TempDir(), "etcd")
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialCluster = member + "=" + peer.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	<-e.Server.ReadyNotify()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client.Host}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	var rev int64
	for _, k := range keys {
		r, err := cli.Put(ctx, k, "v")
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), rev
}

// kubeKeys are keys as kube-apiserver stores a small cluster's objects.
var kubeKeys = []string{
	"/registry/namespaces/default", "/registry/namespaces/kube-system",
	"/registry/minions/cp-1", "/registry/configmaps/kube-system/extension-apiserver-authentication",
	"/registry/secrets/kube-system/bootstrap-token-abcdef",
}

// writePair writes data as dir/name and its sidecar, as backup etcd
// does; edit changes the sidecar first.
func writePair(t testing.TB, dir, name string, data []byte, rev int64, members []string, edit func(*Sidecar)) string {
	t.Helper()
	sum := sha256.Sum256(data)
	s := Sidecar{
		Cluster: "homelab", Time: time.Date(2026, 12, 5, 4, 5, 0, 0, time.UTC), ControlPlane: members[0],
		Endpoint: "10.0.0.11:50000", EtcdRevision: rev, Members: members, Snapshot: name,
		Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), KubernetesVersion: "v1.34.1",
		Inventory: "/inv/inventory.yaml", InventorySHA256: strings.Repeat("ab", 32),
	}
	if edit != nil {
		edit(&s)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeSidecar(SidecarPath(path), s); err != nil {
		t.Fatal(err)
	}
	return path
}

func homelab(t testing.TB) *inventory.Inventory {
	t.Helper()
	inv, err := inventory.Load(filepath.Join("..", "examples", "homelab", "inventory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// A snapshot of a real etcd restores into a real etcd, which serves its
// revision and Kubernetes' keys; the proof lands in the sidecar beside
// every field backup etcd wrote, unchanged, and the work directory is
// left empty.
func TestVerifyRestores(t *testing.T) {
	data, rev := etcdWith(t, "cp-1", kubeKeys)
	dir, work := t.TempDir(), t.TempDir()
	path := writePair(t, dir, "etcd-homelab-20261205T040500Z.db", data, rev, []string{"cp-1"}, nil)
	before, _ := os.ReadFile(SidecarPath(path))

	proof, err := Verify(t.Context(), path, VerifyOptions{Inventory: homelab(t), WorkDir: work})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if proof.Result != ResultRestored || proof.Revision != rev || proof.Members != 1 || proof.Namespaces != 2 ||
		proof.Nodes != 1 || proof.KubeSystem != 1 || proof.Keys != int64(len(kubeKeys)) || proof.EtcdVersion != etcdVersion() ||
		!strings.Contains(proof.How, "etcdutl snapshot restore") || time.Since(proof.Time) > time.Minute {
		t.Errorf("proof: %+v", proof)
	}
	after, _ := os.ReadFile(SidecarPath(path))
	var was, is map[string]json.RawMessage
	if json.Unmarshal(before, &was) != nil || json.Unmarshal(after, &is) != nil {
		t.Fatalf("sidecar:\n%s", after)
	}
	for k, v := range was {
		var a, b any
		_ = json.Unmarshal(v, &a)
		_ = json.Unmarshal(is[k], &b)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("sidecar field %s changed: %s -> %s", k, v, is[k])
		}
	}
	side, err := ReadSidecar(path)
	if err != nil || side.Verified == nil || side.Verified.Result != ResultRestored || side.Verified.Revision != rev {
		t.Errorf("recorded proof: %v\n%s", err, after)
	}
	if !bytes.HasPrefix(after, before[:len(before)-3]) {
		t.Errorf("the sidecar's fields moved:\n%s", after)
	}
	if st, _ := os.Stat(SidecarPath(path)); st.Mode().Perm() != 0o600 {
		t.Errorf("sidecar mode %v", st.Mode().Perm())
	}
	if entries, _ := os.ReadDir(work); len(entries) != 0 {
		t.Errorf("left in the work directory: %v", entries)
	}
	if strings.Contains(string(after), "bootstrap-token-abcdef") {
		t.Error("a Secret's name is in the sidecar")
	}
}

// Each way a snapshot does not restore is reported failed, named, with
// what to do, and recorded as failed.
func TestVerifyRefuses(t *testing.T) {
	inv := homelab(t)
	kube, rev := etcdWith(t, "cp-1", kubeKeys)
	bare, bareRev := etcdWith(t, "cp-1", []string{"/devata-sim/members/cp-1"})
	stranger, strangerRev := etcdWith(t, "stg-cp-1", kubeKeys)
	tampered := bytes.Clone(kube)
	tampered[len(tampered)/2] ^= 0xff
	hostile := snapshottest.Fanout(63)
	for _, c := range []struct {
		name    string
		data    []byte
		rev     int64
		members []string
		edit    func(*Sidecar)
		after   func(path string)
		want    string
	}{
		{"no Kubernetes in it", bare, bareRev, []string{"cp-1"}, nil, nil, "serves no Kubernetes cluster (0 namespaces, kube-system missing, 0 nodes, 0 kube-system objects)"},
		{"changed after it was written", kube, rev, []string{"cp-1"}, nil, func(p string) { _ = os.WriteFile(p, tampered, 0o600) }, "it changed since backup etcd wrote it"},
		{"another cluster's members", stranger, strangerRev, []string{"stg-cp-1"}, nil, nil, `its etcd members "stg-cp-1" are not control planes of the inventory (cp-1, cp-2, cp-3): it is not a backup of homelab`},
		{"members other than the sidecar's", kube, rev, []string{"cp-1", "cp-2"}, nil, nil, "it holds 1 member (cp-1) where its sidecar says 2 (cp-1, cp-2)"},
		{"revision other than the sidecar's", kube, rev, []string{"cp-1"}, func(s *Sidecar) { s.EtcdRevision = rev + 5 }, nil, fmt.Sprintf("its revision is %d where its sidecar says %d", rev, rev+5)},
		{"hash-consistent but no database etcd wrote", hostile, 0, []string{"cp-1"}, nil, nil, "not a database etcd wrote"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, work := t.TempDir(), t.TempDir()
			path := writePair(t, dir, "etcd-homelab-20261205T040500Z.db", c.data, c.rev, c.members, c.edit)
			if c.after != nil {
				c.after(path)
			}
			proof, err := Verify(t.Context(), path, VerifyOptions{Inventory: inv, WorkDir: work})
			if !errors.Is(err, ErrNotRestorable) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v\nwant ErrNotRestorable and %q", err, c.want)
			}
			side, rerr := ReadSidecar(path)
			if proof == nil || proof.Result != ResultFailed || rerr != nil || side.Verified == nil || side.Verified.Result != ResultFailed || !strings.Contains(side.Verified.Error, c.want) {
				t.Errorf("proof %+v; recorded %+v (%v)", proof, side, rerr)
			}
			if entries, _ := os.ReadDir(work); len(entries) != 0 {
				t.Errorf("left in the work directory: %v", entries)
			}
		})
	}
}

// What cannot be checked is an error, not a failed proof, and nothing is
// recorded: no sidecar, a link, a cancelled run.
func TestVerifyCannotCheck(t *testing.T) {
	dir := t.TempDir()
	data, rev := etcdWith(t, "cp-1", kubeKeys)
	lone := filepath.Join(dir, "lone.db")
	if err := os.WriteFile(lone, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := Verify(t.Context(), lone, VerifyOptions{}); p != nil || err == nil || !strings.Contains(err.Error(), "has no sidecar") {
		t.Errorf("no sidecar: %+v, %v", p, err)
	}
	path := writePair(t, dir, "etcd-homelab-20261205T040500Z.db", data, rev, []string{"cp-1"}, nil)
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(SidecarPath(path), SidecarPath(link)); err != nil {
		t.Fatal(err)
	}
	if p, err := Verify(t.Context(), link, VerifyOptions{}); p != nil || err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("a link: %+v, %v", p, err)
	}
	onlyLinked := filepath.Join(dir, "only-linked.db")
	if err := os.Symlink(path, onlyLinked); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(SidecarPath(path))
	if err := os.WriteFile(SidecarPath(onlyLinked), []byte(strings.Replace(string(raw), "etcd-homelab-20261205T040500Z.db", "only-linked.db", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := Verify(t.Context(), onlyLinked, VerifyOptions{}); p != nil || err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("a linked snapshot with its own sidecar: %+v, %v", p, err)
	}
	if side, _ := ReadSidecar(onlyLinked); side == nil || side.Verified != nil {
		t.Errorf("recorded for a linked snapshot: %+v", side)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if p, err := Verify(ctx, path, VerifyOptions{}); p != nil || err == nil {
		t.Errorf("cancelled: %+v, %v", p, err)
	}
	if side, _ := ReadSidecar(path); side.Verified != nil {
		t.Errorf("a proof was recorded: %+v", side.Verified)
	}
}

// Ctrl-C while the restored etcd serves: Verify returns at once, the etcd
// is stopped (its port refuses), its directory is gone, nothing is
// recorded.
func TestVerifyInterruptedWhileServing(t *testing.T) {
	data, rev := etcdWith(t, "cp-1", kubeKeys)
	dir, work := t.TempDir(), t.TempDir()
	path := writePair(t, dir, "etcd-homelab-20261205T040500Z.db", data, rev, []string{"cp-1"}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var served string
	servingHook = func(addr string) {
		served = addr
		if entries, _ := os.ReadDir(work); len(entries) != 1 {
			t.Errorf("while serving, the work directory holds %v", entries)
		}
		cancel()
	}
	defer func() { servingHook = nil }()
	proof, err := Verify(ctx, path, VerifyOptions{Inventory: homelab(t), WorkDir: work})
	if proof != nil || err == nil || !strings.Contains(err.Error(), "interrupted") || !strings.Contains(err.Error(), "nothing was recorded") {
		t.Errorf("interrupted: %+v, %v", proof, err)
	}
	if served == "" {
		t.Fatal("the restored etcd never served")
	}
	if c, err := net.DialTimeout("tcp", served, time.Second); err == nil {
		c.Close()
		t.Errorf("the restored etcd still listens at %s", served)
	}
	if entries, _ := os.ReadDir(work); len(entries) != 0 {
		t.Errorf("left in the work directory: %v", entries)
	}
	if side, _ := ReadSidecar(path); side.Verified != nil {
		t.Errorf("a proof was recorded: %+v", side.Verified)
	}
}
