//go:build talosctl

package sim_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// The storage commands storagecheck's findings name as next steps work with
// the real talosctl against the simulated node, faults included.
func TestRealTalosctlStorage(t *testing.T) {
	bin, err := testenv.Talosctl(context.Background(), tlog{t})
	if err != nil {
		t.Fatal(err)
	}
	f := simtest.Start(t, simtest.Options{})
	f.Sim.Machine("worker-1").SetFaults(sim.Faults{
		DiskSignatures:      map[string]string{"/dev/sdc": "xfs"},
		KubeletMountOptions: map[string][]string{"/var/mnt/longhorn": {"bind", "rw"}},
	})
	tc := f.Talosconfig(t)
	ctx := tc.Contexts[tc.Context]
	ctx.Endpoints = []string{f.Overrides["cp-1"]}
	ctx.Nodes = []string{"worker-1"}
	tcPath := filepath.Join(t.TempDir(), "talosconfig")
	if err := tc.Save(tcPath); err != nil {
		t.Fatal(err)
	}
	run := func(args []string, wants []string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--talosconfig", tcPath}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil && !bytes.Contains(out, []byte("NotFound")) {
			t.Errorf("talosctl %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		for _, w := range wants {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("talosctl %s: output lacks %q:\n%s", strings.Join(args, " "), w, out)
			}
		}
	}
	for _, tc := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"get", "volumestatus", "u-longhorn", "-o", "yaml"}, []string{"phase: ready", "filesystem: xfs", "location: /dev/sdb1"}},
		{[]string{"get", "mountstatus"}, []string{"u-longhorn", "/var/mnt/longhorn", "xfs"}},
		{[]string{"get", "discoveredvolumes"}, []string{"sdc", "xfs", "sdb1"}},
		// worker-1 selects an NVMe install disk; the data disks are SATA
		{[]string{"get", "disks"}, []string{"nvme0n1", "275 GB", "nvme", "sdb", "sdc", "sata"}},
		{[]string{"get", "systemdisk"}, []string{"nvme0n1"}},
		{[]string{"get", "kubeletspec", "-o", "yaml"}, []string{"destination: /var/mnt/longhorn", "- bind", "- rw"}},
		{[]string{"get", "volumeconfig", "u-longhorn"}, nil}, // not simulated: talosctl must still resolve the type
		{[]string{"mounts"}, []string{"/dev/sdb1", "/var/mnt/longhorn"}},
	} {
		run(tc.args, tc.wants)
	}

	// internal/app/machined/pkg/controllers/block/internal/volumes/format.go
	// Format: a partition with another filesystem fails the volume
	f.Sim.Machine("worker-1").SetFaults(sim.Faults{VolumeFilesystem: map[string]string{"longhorn": "ext4"}})
	run([]string{"get", "volumestatus", "u-longhorn", "-o", "yaml"}, []string{"phase: failed", "preFailPhase: prepared", "filesystem type mismatch: ext4 != xfs", "location: /dev/sdb1"})
	run([]string{"get", "discoveredvolumes", "sdb1", "-o", "yaml"}, []string{"name: ext4"})
}
