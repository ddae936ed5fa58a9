package sim_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

// snapshot reads EtcdSnapshot's raw stream: the bytes and each message's
// size. It does not go through client.ReadStream, which takes a
// DeadlineExceeded for the end of the stream.
func snapshot(t *testing.T, c *client.Client) (data []byte, chunks []int, err error) {
	t.Helper()

	stream, err := c.MachineClient.EtcdSnapshot(ctxTimeout(t, 5*time.Second), &machine.EtcdSnapshotRequest{})
	if err != nil {
		return nil, nil, err
	}

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return data, chunks, nil
		}

		if err != nil {
			return data, chunks, err
		}

		data = append(data, msg.GetBytes()...)
		chunks = append(chunks, len(msg.GetBytes()))
	}
}

// etcdShaped reports what etcdutl's restore checks: the size is a multiple
// of 512 plus a sha256, and the sha256 of what precedes it.
func etcdShaped(data []byte) error {
	if len(data)%512 != sha256.Size {
		return errors.New("size is not 512·n + 32")
	}

	sum := sha256.Sum256(data[:len(data)-sha256.Size])
	if !bytes.Equal(sum[:], data[len(data)-sha256.Size:]) {
		return errors.New("sha256 mismatch")
	}

	return nil
}

// EtcdSnapshot as machined serves it (v1alpha1_server.go EtcdSnapshot):
// Unimplemented on a worker, the etcd client's wait on a control plane
// whose etcd does not run, os:reader refused; on a member a bbolt file and
// its sha256 in 1024-byte common.Data messages (pkg/chunker/stream), the
// same from every member of the cluster, and the same twice.
func TestEtcdSnapshot(t *testing.T) {
	t.Parallel()

	cp, wk := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "cp-2", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "w-1", Role: "worker", Config: wk},
	)
	cp1, cp2 := admin(t, f.Machine("cp-1").Addr()), admin(t, f.Machine("cp-2").Addr())

	_, _, err := snapshot(t, admin(t, f.Machine("w-1").Addr()))
	if client.StatusCode(err) != codes.Unimplemented || !strings.Contains(err.Error(), "etcd snapshot is only available on control plane nodes") {
		t.Errorf("snapshot on a worker: %v, want Unimplemented as checkControlplane answers", err)
	}

	begin := time.Now()
	if _, _, err := snapshot(t, cp1); client.StatusCode(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "failed reading etcd snapshot") || time.Since(begin) < 150*time.Millisecond {
		t.Errorf("snapshot before bootstrap: %v after %s, want DeadlineExceeded \"failed reading etcd snapshot\" after the client's wait", err, time.Since(begin))
	}

	if err := cp1.Bootstrap(t.Context(), &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	eventually(t, "cp-2 joins", func() error {
		_, _, err := snapshot(t, cp2)

		return err
	})

	data, chunks, err := snapshot(t, cp1)
	if err != nil {
		t.Fatal(err)
	}

	if err := etcdShaped(data); err != nil {
		t.Fatalf("snapshot of %d bytes: %v", len(data), err)
	}

	for i, n := range chunks {
		if n > 1024 || (n != 1024 && i != len(chunks)-1) {
			t.Fatalf("chunk %d of %d is %d bytes; machined's Chunker sends 1024 a message", i, len(chunks), n)
		}
	}

	// a bbolt file: the magic in the first meta page, 4 KiB pages
	if binary.LittleEndian.Uint32(data[16:]) != 0xED0CDAED || binary.LittleEndian.Uint32(data[24:]) != 4096 {
		t.Errorf("no bbolt meta page at the start: % x", data[:64])
	}

	for _, want := range []string{`"name":"cp-1"`, `"name":"cp-2"`, "/devata-sim/members/cp-2", "storageVersion", "3.6.0"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("snapshot lacks %q", want)
		}
	}

	want, rev := f.EtcdSnapshotFile("cp-1")
	if !bytes.Equal(data, want) || rev != 3 || f.EtcdClusters()[0].Revision != 3 {
		t.Errorf("streamed %d bytes, EtcdSnapshotFile %d, revision %d (clusters %+v); want the same file at revision 3 (1, then a put per member start)", len(data), len(want), rev, f.EtcdClusters())
	}

	if again, _, err := snapshot(t, cp2); err != nil || !bytes.Equal(again, data) {
		t.Errorf("cp-2's snapshot: %v, equal %v; want the same bytes from every member", err, bytes.Equal(again, data))
	}

	// through apid: talosctl sends `nodes`, and every message is stamped
	r, err := cp2.EtcdSnapshot(client.WithNodes(ctxTimeout(t, 5*time.Second), "cp-1"), &machine.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}

	if proxied, err := io.ReadAll(r); err != nil || !bytes.Equal(proxied, data) {
		t.Errorf("snapshot of cp-1 through cp-2's apid: %v, %d bytes, want %d", err, len(proxied), len(data))
	}

	for _, tc := range []struct {
		roles role.Set
		want  codes.Code
	}{
		{role.MakeSet(role.Reader), codes.PermissionDenied},
		{role.MakeSet(role.EtcdBackup), codes.OK},
		{role.MakeSet(role.Operator), codes.OK},
	} {
		if _, _, err := snapshot(t, dial(t, tc.roles, f.Machine("cp-1").Addr())); client.StatusCode(err) != tc.want {
			t.Errorf("snapshot as %v: %v, want %s (services/machined.go rules)", tc.roles.Strings(), err, tc.want)
		}
	}
}

// The snapshot faults: a corrupt stream keeps its size and differs in one
// byte, so only the sha256 tells; a cut stream ends early with status OK,
// as machined's Chunker ends when its read from etcd breaks off. Both come
// from the faults file too.
func TestEtcdSnapshotFaults(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
	c := admin(t, f.Machine("cp-1").Addr())

	if err := c.Bootstrap(t.Context(), &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	good, _ := f.EtcdSnapshotFile("cp-1")

	path := filepath.Join(t.TempDir(), "faults.yaml")
	if err := os.WriteFile(path, []byte("cp-1: {etcdSnapshotCorrupt: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	faults, err := sim.LoadFaultsFile(path)
	if err != nil || !faults["cp-1"].EtcdSnapshotCorrupt {
		t.Fatalf("faults file: %+v, %v", faults, err)
	}

	f.Machine("cp-1").SetFaults(faults["cp-1"])

	bad, _, err := snapshot(t, c)
	if err != nil || len(bad) != len(good) {
		t.Fatalf("corrupt snapshot: %v, %d bytes, want %d", err, len(bad), len(good))
	}

	diff := 0

	for i := range bad {
		if bad[i] != good[i] {
			diff++
		}
	}

	if diff != 1 || etcdShaped(bad) == nil {
		t.Errorf("corrupt snapshot differs in %d bytes (want 1) and its hash check says %v", diff, etcdShaped(bad))
	}

	f.Machine("cp-1").SetFaults(sim.Faults{EtcdSnapshotCutAt: 5000})

	cut, _, err := snapshot(t, c)
	if err != nil || len(cut) != 5000 || !bytes.Equal(cut, good[:5000]) {
		t.Errorf("cut snapshot: %v, %d bytes; want status OK after 5000 bytes of the snapshot", err, len(cut))
	}

	// a fault is no lasting damage
	f.Machine("cp-1").SetFaults(sim.Faults{})

	if again, _, err := snapshot(t, c); err != nil || !bytes.Equal(again, good) {
		t.Errorf("after the faults: %v, equal %v", err, bytes.Equal(again, good))
	}
}
