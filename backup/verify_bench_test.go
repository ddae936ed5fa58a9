package backup

import (
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// benchSnapshot writes a snapshot pair of about mib MiB into dir: a real
// etcd (one member, cp-1) holding Kubernetes' keys and mib values of
// 1 MiB each (random, so nothing compresses), snapshotted as Talos relays
// it. It returns the snapshot's path.
func benchSnapshot(b *testing.B, dir string, mib int) string {
	b.Helper()
	ports, err := freePorts(2)
	if err != nil {
		b.Fatal(err)
	}
	peer, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[0]))
	client, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "cp-1", filepath.Join(b.TempDir(), "etcd")
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialCluster = "cp-1=" + peer.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	cfg.QuotaBackendBytes = 8 << 30
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	<-e.Server.ReadyNotify()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client.Host}, Logger: zap.NewNop(), MaxCallSendMsgSize: 2 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := b.Context()
	var rev int64
	put := func(k, v string) {
		r, err := cli.Put(ctx, k, v)
		if err != nil {
			b.Fatal(err)
		}
		rev = r.Header.Revision
	}
	for _, k := range kubeKeys {
		put(k, "v")
	}
	value := make([]byte, 1<<20-1024) // under etcd's 1.5 MiB request limit
	for i := range mib {
		rand.Read(value)
		put(fmt.Sprintf("/registry/configmaps/kube-system/big-%05d", i), string(value))
	}
	path := filepath.Join(dir, fmt.Sprintf("etcd-homelab-bench-%dMiB.db", mib))
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.ReadFrom(rc); err != nil {
		b.Fatal(err)
	}
	rc.Close()
	f.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	writePair(b, dir, filepath.Base(path), data, rev, []string{"cp-1"}, nil)
	return path
}

// BenchmarkVerify proves a snapshot of DEVATA_BENCH_MIB MiB (100 unless
// set) restores, as backup verify does, and prints the time, the
// throughput and the process' peak RSS (which includes the etcd that
// generated the snapshot: docs/scale.md has figures of the command alone,
// measured with /usr/bin/time). DEVATA_BENCH_DIR keeps the snapshot pair
// there, for measuring devata backup verify by hand.
//
//	go test ./backup -run '^$' -bench BenchmarkVerify -benchtime 3x
func BenchmarkVerify(b *testing.B) {
	mib := 100
	if s := os.Getenv("DEVATA_BENCH_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("DEVATA_BENCH_MIB=%s: %v", s, err)
		}
		mib = n
	}
	dir := os.Getenv("DEVATA_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	start := time.Now()
	path := benchSnapshot(b, dir, mib)
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("snapshot of %d MiB (%d bytes) generated in %s: %s", mib, st.Size(), time.Since(start).Round(time.Millisecond), path)
	inv := homelab(b)
	b.SetBytes(st.Size())
	b.ResetTimer()
	for b.Loop() {
		if _, err := Verify(b.Context(), path, VerifyOptions{Inventory: inv}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		b.ReportMetric(float64(ru.Maxrss)/1024, "peak-RSS-MiB")
	}
}
