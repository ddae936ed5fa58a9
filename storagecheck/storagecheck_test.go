package storagecheck_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/sim"
	"devata.dev/devata/storagecheck"
	"devata.dev/devata/talosapi"
)

// check runs every storage check against one machine of the fleet, observed
// through the real machinery client, and returns the results by check name.
func check(t *testing.T, f *simtest.Fleet, m *inventory.Machine, desired []byte) map[string][]drift.Result {
	t.Helper()
	ctx := t.Context()
	c, err := f.Dialer.Client(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	obs := storagecheck.Observe(ctx, c, m)
	mo := talosapi.Observe(ctx, f.Dialer, m) // the active config, as devata drift has it
	target := storagecheck.NewTarget(m, desired, mo.Active, mo.ConfigErr, obs)
	out := map[string][]drift.Result{}
	for _, ch := range storagecheck.Checks() {
		out[ch.Name] = ch.Evaluate(ctx, m.Name, target)
	}
	return out
}

func describe(rs []drift.Result) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "\n  %s %s: %s (desired %q, actual %q) evidence %q next %q", r.Check, r.Status, r.Reason, r.Desired, r.Actual, r.Evidence, r.Next)
	}
	return b.String()
}

func TestHomelabInSync(t *testing.T) {
	t.Parallel()
	f := simtest.Start(t, simtest.Options{})
	for i := range f.Inventory.Machines {
		m := &f.Inventory.Machines[i]
		results := check(t, f, m, f.Desired[m.Name])
		for name, rs := range results {
			for _, r := range rs {
				if r.Status != drift.StatusInSync {
					t.Errorf("%s %s: %s", m.Name, name, describe(rs))
				}
			}
		}
		volumes := describe(results[storagecheck.CheckVolumes])
		mounts := describe(results[storagecheck.CheckMounts])
		if len(m.Volumes) == 0 {
			for name, rs := range results {
				if !strings.Contains(describe(rs), "no volumes expected") {
					t.Errorf("%s %s: want evidence \"no volumes expected\":%s", m.Name, name, describe(rs))
				}
			}
			continue
		}
		for _, want := range []string{"VolumeStatus u-longhorn ready, xfs", "on /dev/sdb1"} {
			if !strings.Contains(volumes, want) {
				t.Errorf("%s volumes: want %q in%s", m.Name, want, volumes)
			}
		}
		for _, want := range []string{"MountStatus u-longhorn: /dev/sdb1 on /var/mnt/longhorn xfs rw", "Mounts: /dev/sdb1 on /var/mnt/longhorn", "KubeletSpec extraMount /var/mnt/longhorn → /var/mnt/longhorn (bind,rshared,rw)"} {
			if !strings.Contains(mounts, want) {
				t.Errorf("%s mounts: want %q in%s", m.Name, want, mounts)
			}
		}
	}
}

const legacyPatch = `machine:
  disks:
    - device: /dev/sdd
      partitions:
        - mountpoint: /var/mnt/legacy
          size: 100GB
`

func patched(t *testing.T, cfg []byte, patch string) []byte {
	t.Helper()
	p, err := configpatcher.LoadPatch([]byte(patch))
	if err != nil {
		t.Fatal(err)
	}
	out, err := configpatcher.Apply(configpatcher.WithBytes(cfg), []configpatcher.Patch{p})
	if err != nil {
		t.Fatal(err)
	}
	b, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func userVolume(name, selector string) string {
	return fmt.Sprintf("apiVersion: v1alpha1\nkind: UserVolumeConfig\nname: %s\nprovisioning:\n  diskSelector:\n    match: '%s'\n  minSize: 10GiB\n", name, selector)
}

func withDocs(cfg []byte, docs ...string) []byte {
	return []byte(strings.TrimRight(string(cfg), "\n") + "\n---\n" + strings.Join(docs, "---\n"))
}

// readOnly asks for the machine's first volume in the kubelet read-only.
func readOnly(m *inventory.Machine) {
	m.Volumes = slices.Clone(m.Volumes)
	m.Volumes[0].KubeletMount = "ro"
}

// withoutVolumes is cfg without its UserVolumeConfig documents.
func withoutVolumes(cfg []byte) []byte {
	var keep []string
	for doc := range strings.SplitSeq(string(cfg), "---\n") {
		if !strings.Contains(doc, "kind: UserVolumeConfig") {
			keep = append(keep, doc)
		}
	}
	return []byte(strings.Join(keep, "---\n"))
}

// Each case breaks worker-1 in one way and names the check that must see it.
func TestFailures(t *testing.T) {
	t.Parallel()
	f := simtest.Start(t, simtest.Options{})
	desired := f.Desired["worker-1"]
	legacy := patched(t, desired, legacyPatch)
	sdc := []inventory.RawDisk{{Selector: `disk.dev_path == "/dev/sdc"`, MinCount: 1}}
	hog := withDocs(desired, userVolume("hog", "!system_disk"))             // sorts before u-longhorn, takes a disk whole
	stuck := withDocs(desired, userVolume("aaa", "disk.size > 100u * TiB")) // matches no disk, sorts before u-longhorn
	noMounts := patched(t, desired, "machine:\n  kubelet:\n    extraMounts:\n      $patch: delete\n")

	for _, tc := range []struct {
		name    string
		faults  sim.Faults
		machine func(*inventory.Machine)
		desired []byte // default: the rendered config
		active  []byte // replaces the applied config behind devata's back
		check   string
		status  drift.Status
		reason  []string
		next    string
		others  drift.Status // every other check's status; "" means not checked
		// evidence must be one of the result's evidence lines
		evidence string
	}{
		{
			name: "no disk matched", faults: sim.Faults{DisksMissing: []string{"/dev/sdb", "/dev/sdc"}},
			check: storagecheck.CheckVolumes, status: drift.StatusDrifted,
			reason: []string{"u-longhorn is waiting for a disk: no disks matched selector for volume", `diskSelector "!system_disk"`},
			next:   "get disks",
		},
		{
			name: "failed with a message", faults: sim.Faults{VolumeFailed: map[string]string{"longhorn": "error formatting volume: mkfs.xfs: exit status 1"}},
			check: storagecheck.CheckVolumes, status: drift.StatusDrifted,
			reason: []string{"u-longhorn failed after provisioned: error formatting volume: mkfs.xfs: exit status 1"},
			next:   "get volumestatus u-longhorn -o yaml",
		},
		{
			// format.go Format: a partition with another filesystem fails the volume while prepared
			name: "wrong filesystem", faults: sim.Faults{VolumeFilesystem: map[string]string{"longhorn": "ext4"}},
			check: storagecheck.CheckVolumes, status: drift.StatusDrifted,
			reason: []string{"u-longhorn failed: its partition /dev/sdb1 already carries ext4, the volume wants xfs", `"filesystem type mismatch: ext4 != xfs"`},
			next:   "talosctl -n 10.20.0.21 get discoveredvolumes sdb1 -o yaml shows what is on it; to keep its data, set the volume's filesystem to ext4",
		},
		{
			name: "wrong filesystem wiped", faults: sim.Faults{VolumeFilesystem: map[string]string{"longhorn": "ext4"}},
			check: storagecheck.CheckVolumes, status: drift.StatusDrifted,
			next: "talosctl -n 10.20.0.21 wipe disk sdb1 --skip-volume-check (u-longhorn holds it, so a plain wipe is refused), then Talos formats it xfs",
		},
		{
			name: "wrong filesystem not mounted", faults: sim.Faults{VolumeFilesystem: map[string]string{"longhorn": "ext4"}},
			check: storagecheck.CheckMounts, status: drift.StatusDrifted,
			reason: []string{"nothing is mounted at /var/mnt/longhorn (VolumeStatus u-longhorn is failed: see storage-volumes)"},
		},
		{
			// locate.go LocateAndProvision, disk.go CheckDiskForProvisioning: u-hog sorts first and takes /dev/sdb whole
			name: "disks full", desired: hog, active: hog, faults: sim.Faults{DisksMissing: []string{"/dev/sdc"}},
			check: storagecheck.CheckVolumes, status: drift.StatusDrifted,
			reason: []string{"u-longhorn is waiting for a disk: no disks matched for volume (1 matched selector): 1 have not enough space", "a volume without maxSize takes all the free space of its disk"},
			next:   "get volumestatus shows which volumes took the matched disks: give them a maxSize",
		},
		{
			name: "disk of the wrong format", faults: sim.Faults{DisksMissing: []string{"/dev/sdc"}, DiskSignatures: map[string]string{"/dev/sdb": "bluestore"}},
			check: storagecheck.CheckVolumes, status: drift.StatusDrifted,
			reason: []string{"1 have wrong format", "Talos partitions only blank or GPT disks, and a matched disk carries another signature (disks with one: sdb bluestore)"},
			next:   "get discoveredvolumes shows what is on the matched disks; only if its data is disposable: talosctl -n 10.20.0.21 wipe disk sdb;",
		},
		{
			// volume_manager.go: u-aaa fails first, so u-longhorn is never started
			name: "waiting behind a failed volume", desired: stuck, active: stuck,
			check: storagecheck.CheckVolumes, status: drift.StatusDrifted,
			reason: []string{"u-longhorn is waiting behind u-aaa (failed): Talos provisions volumes one after another"},
			next:   "fix u-aaa (failed) first",
		},
		{
			name: "too small", faults: sim.Faults{VolumeSize: map[string]uint64{"longhorn": 50 << 30}},
			check: storagecheck.CheckVolumes, status: drift.StatusDrifted,
			reason: []string{"u-longhorn is 50 GiB, below minSize 100 GiB"},
			next:   "grows it only with grow: true",
		},
		{
			name: "mount missing", faults: sim.Faults{MountMissing: []string{"longhorn"}},
			check: storagecheck.CheckMounts, status: drift.StatusDrifted,
			reason: []string{"volume longhorn: nothing is mounted at /var/mnt/longhorn"},
			next:   "get mountstatus",
		},
		{
			name: "kubelet mount missing", faults: sim.Faults{KubeletMountMissing: []string{"/var/mnt/longhorn"}},
			check: storagecheck.CheckMounts, status: drift.StatusDrifted,
			reason: []string{"the kubelet has no extraMount for /var/mnt/longhorn"},
			next:   "get kubeletspec -o yaml", others: drift.StatusInSync,
		},
		{
			name: "kubelet mount not rshared", faults: sim.Faults{KubeletMountOptions: map[string][]string{"/var/mnt/longhorn": {"bind", "rw"}}},
			check: storagecheck.CheckMounts, status: drift.StatusDrifted,
			reason: []string{"the kubelet's extraMount /var/mnt/longhorn lacks rshared"},
			next:   "get kubeletspec -o yaml", others: drift.StatusInSync,
		},
		{
			// system/services/kubelet.go: /var/mnt is always in the kubelet, rbind,rshared,ro
			name: "kubelet ro without an extraMount", desired: noMounts, active: noMounts,
			machine: readOnly,
			check:   storagecheck.CheckMounts, status: drift.StatusInSync, others: drift.StatusInSync,
			evidence: "no kubelet extraMount for /var/mnt/longhorn: Talos bind-mounts /var/mnt into the kubelet (rbind,rshared,ro)",
		},
		{
			name: "kubelet ro declared without an extraMount", desired: noMounts, active: noMounts,
			machine: readOnly,
			check:   storagecheck.CheckDeclaration, status: drift.StatusInSync,
		},
		{
			name: "kubelet ro with the rendered extraMount", faults: sim.Faults{KubeletMountMissing: []string{"/var/mnt/longhorn"}},
			machine: readOnly,
			check:   storagecheck.CheckMounts, status: drift.StatusInSync,
		},
		{
			name: "kubelet rw needs an extraMount", desired: noMounts, active: noMounts,
			check: storagecheck.CheckDeclaration, status: drift.StatusDrifted,
			reason: []string{"active config has no kubelet extraMount for /var/mnt/longhorn"},
			next:   "devata apply --machines worker-1",
		},
		{
			// v1alpha1_server.go Mounts fails as a whole; MountStatus still answers
			name: "Mounts API failing", faults: sim.Faults{ErrorCodes: map[string]codes.Code{"Mounts": codes.Unknown}},
			check: storagecheck.CheckMounts, status: drift.StatusUnknown,
			reason:   []string{"volume longhorn: mounts: sim: injected Unknown"},
			next:     "talosctl -n 10.20.0.21 mounts fails as a whole when statfs fails on any one mount point",
			evidence: "MountStatus u-longhorn: /dev/sdb1 on /var/mnt/longhorn xfs rw",
		},
		{
			name: "Mounts API failing with a capacity to check", faults: sim.Faults{ErrorCodes: map[string]codes.Code{"Mounts": codes.Unknown}},
			desired: legacy, active: legacy,
			machine: func(m *inventory.Machine) {
				m.Mounts = []inventory.Mount{{Path: "/var/mnt/legacy", MinSize: "90GB", ReadWrite: new(true)}}
			},
			check: storagecheck.CheckMounts, status: drift.StatusUnknown,
			reason: []string{"capacity of /var/mnt/legacy not known"},
		},
		{
			name: "raw disk blank", machine: func(m *inventory.Machine) { m.RawDisks = sdc },
			check: storagecheck.CheckRawDisks, status: drift.StatusInSync, others: drift.StatusInSync,
		},
		{
			name: "raw disk with a leftover xfs signature", faults: sim.Faults{DiskSignatures: map[string]string{"/dev/sdc": "xfs"}},
			machine: func(m *inventory.Machine) { m.RawDisks = sdc },
			check:   storagecheck.CheckRawDisks, status: drift.StatusDrifted,
			reason: []string{"/dev/sdc carries a leftover xfs signature"},
			next:   "wipe disk sdc", others: drift.StatusInSync,
		},
		{
			name: "raw disk allowed signature", faults: sim.Faults{DiskSignatures: map[string]string{"/dev/sdc": "bluestore"}},
			machine: func(m *inventory.Machine) {
				m.RawDisks = []inventory.RawDisk{{Selector: sdc[0].Selector, MinCount: 1, AllowSignatures: []string{"bluestore"}}}
			},
			check: storagecheck.CheckRawDisks, status: drift.StatusInSync,
		},
		{
			name: "raw disks too few", machine: func(m *inventory.Machine) {
				m.RawDisks = []inventory.RawDisk{{Selector: `!system_disk && disk.size < 1500u * GiB`, MinCount: 2}}
			},
			check: storagecheck.CheckRawDisks, status: drift.StatusDrifted,
			reason: []string{"the selector matches 1 disks, want at least 2"},
		},
		{
			name: "raw disk partitioned", machine: func(m *inventory.Machine) {
				m.RawDisks = []inventory.RawDisk{{Selector: `disk.dev_path == "/dev/sdb"`, MinCount: 1}}
			},
			check: storagecheck.CheckRawDisks, status: drift.StatusDrifted,
			reason: []string{"/dev/sdb has partitions [/dev/sdb1]"},
		},
		{
			name: "legacy partition in place", desired: legacy, active: legacy,
			machine: func(m *inventory.Machine) {
				m.Mounts = []inventory.Mount{{Path: "/var/mnt/legacy", Filesystem: "xfs", MinSize: "90GB", ReadWrite: new(true)}}
			},
			check: storagecheck.CheckVolumes, status: drift.StatusInSync, others: drift.StatusInSync,
		},
		{
			name: "legacy partition missing", desired: legacy, active: legacy, faults: sim.Faults{PartitionMissing: []string{"/var/mnt/legacy"}},
			check: storagecheck.CheckVolumes, status: drift.StatusDrifted,
			reason: []string{"Talos has no VolumeStatus /dev/sdd-1 for machine.disks /dev/sdd partition 1 (/var/mnt/legacy)"},
			next:   "get volumeconfig /dev/sdd-1",
		},
		{
			name: "legacy partition not declared", desired: legacy,
			check: storagecheck.CheckDeclaration, status: drift.StatusDrifted,
			reason: []string{"active config lacks machine.disks partition /var/mnt/legacy on /dev/sdd"},
			next:   "devata apply --machines worker-1",
		},
		{
			name: "mount too small", desired: legacy, active: legacy,
			machine: func(m *inventory.Machine) {
				m.Mounts = []inventory.Mount{{Path: "/var/mnt/legacy", MinSize: "1TiB", ReadWrite: new(true)}}
			},
			check: storagecheck.CheckMounts, status: drift.StatusDrifted,
			reason: []string{"mount /var/mnt/legacy: /var/mnt/legacy has 93 GiB, below minSize 1.0 TiB"},
		},
		{
			name: "volume not declared", active: withoutVolumes(desired),
			check: storagecheck.CheckDeclaration, status: drift.StatusDrifted,
			reason: []string{"active config has no UserVolumeConfig longhorn"},
			next:   "get volumeconfig u-longhorn -o yaml",
		},
		{
			name: "permission denied", faults: sim.Faults{ErrorCodes: map[string]codes.Code{"/cosi.resource.State/List": codes.PermissionDenied}},
			check: storagecheck.CheckVolumes, status: drift.StatusUnknown,
			reason: []string{"list VolumeStatus: sim: injected PermissionDenied"},
			next:   "os:reader",
		},
		{
			name: "node unreachable", faults: sim.Faults{Unreachable: true}, machine: func(m *inventory.Machine) { m.RawDisks = sdc },
			check: storagecheck.CheckMounts, status: drift.StatusUnknown,
			reason: []string{"talos api: list VolumeStatus: not reachable"}, next: "version", others: drift.StatusUnknown,
		},
		{
			name: "volume not configured", active: withoutVolumes(desired),
			check: storagecheck.CheckVolumes, status: drift.StatusDrifted,
			reason: []string{"Talos has no VolumeStatus u-longhorn for volume longhorn"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sm := f.Sim.Machine("worker-1")
			faults := tc.faults
			faults.DriftedConfig = tc.active
			if tc.active == nil {
				faults.DriftedConfig = desired
			}
			sm.SetFaults(faults)
			m := *f.Inventory.Machine("worker-1")
			if tc.machine != nil {
				tc.machine(&m)
			}
			want := tc.desired
			if want == nil {
				want = desired
			}
			results := check(t, f, &m, want)
			rs := results[tc.check]
			t.Log(describe(rs))
			var r *drift.Result
			for i := range rs {
				if rs[i].Status == tc.status && (r == nil || len(tc.reason) > 0 && strings.Contains(rs[i].Reason, tc.reason[0])) {
					r = &rs[i]
				}
			}
			if r == nil {
				t.Fatalf("%s: no %s result:%s", tc.check, tc.status, describe(rs))
			}
			for _, s := range tc.reason {
				if !strings.Contains(r.Reason, s) {
					t.Errorf("reason %q lacks %q", r.Reason, s)
				}
			}
			if !strings.Contains(r.Next, tc.next) || r.Status == drift.StatusDrifted && (r.Next == "" || r.Desired == "" || r.Actual == "" || len(r.Evidence) == 0) {
				t.Errorf("want desired, actual, evidence and a next step naming %q:%s", tc.next, describe([]drift.Result{*r}))
			}
			if tc.evidence != "" && !slices.ContainsFunc(r.Evidence, func(e string) bool { return strings.Contains(e, tc.evidence) }) {
				t.Errorf("evidence lacks %q:%s", tc.evidence, describe([]drift.Result{*r}))
			}
			if tc.others != "" {
				for name, rs := range results {
					for _, o := range rs {
						if name != tc.check && o.Status != tc.others {
							t.Errorf("%s: want %s:%s", name, tc.others, describe(rs))
						}
					}
				}
			}
		})
	}
}

// An unobserved machine is Unknown in every storage check, also where it
// expects nothing of that check (no raw disks; a new worker with no storage
// at all): nothing was seen, and an Unknown is never reported as InSync.
func TestUnknownWhenNotObserved(t *testing.T) {
	t.Parallel()
	withVolume := &inventory.Machine{Name: "w", Address: "10.0.0.1", Volumes: []inventory.Volume{{Name: "data", MinSize: "1GiB", Filesystem: "xfs", DiskSelector: "!system_disk"}}}
	bare := &inventory.Machine{Name: "new", Address: "10.0.0.2"}
	unreachable := &storagecheck.Observation{Err: fmt.Errorf("dial 10.0.0.1:50000: connection refused")}
	for _, tc := range []struct {
		m   *inventory.Machine
		obs *storagecheck.Observation
	}{{withVolume, nil}, {withVolume, unreachable}, {bare, unreachable}} {
		target := storagecheck.NewTarget(tc.m, nil, nil, nil, tc.obs)
		for _, ch := range storagecheck.Checks() {
			for _, r := range ch.Evaluate(context.Background(), tc.m.Name, target) {
				if r.Status != drift.StatusUnknown || r.Next == "" {
					t.Errorf("%s of %s with observation %v: %s", ch.Name, tc.m.Name, tc.obs, describe([]drift.Result{r}))
				}
			}
		}
	}
}

// A volume Talos has not got to yet (an earlier wave still provisioning) is
// waiting without a message.
func TestWaitingWithoutMessage(t *testing.T) {
	t.Parallel()
	m := &inventory.Machine{Name: "w", Address: "10.0.0.1", Volumes: []inventory.Volume{{Name: "data", MinSize: "1GiB", Filesystem: "xfs", DiskSelector: "!system_disk"}}}
	obs := &storagecheck.Observation{Volumes: map[string]storagecheck.Volume{"u-data": {ID: "u-data", Phase: "waiting"}}}
	rs := storagecheck.Checks()[1].Evaluate(context.Background(), m.Name, storagecheck.NewTarget(m, nil, nil, nil, obs))
	if len(rs) != 1 || rs[0].Status != drift.StatusDrifted || rs[0].Reason != `u-data is waiting for a disk (diskSelector "!system_disk")` {
		t.Errorf("got%s", describe(rs))
	}
}
