package inventory_test

import (
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/internal/golden"
	"devata.dev/devata/inventory"
)

func TestValidInventories(t *testing.T) {
	files, _ := filepath.Glob("testdata/valid-*.yaml")
	if len(files) == 0 {
		t.Fatal("no valid inventories under testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if _, err := inventory.Load(f); err != nil {
				t.Fatalf("Load: %v", err)
			}
		})
	}
}

// Each invalid-NAME.yaml has invalid-NAME.err next to it: the exact error lines.
func TestInvalidInventories(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid-*.yaml")
	if len(files) < 25 {
		t.Fatalf("want at least 25 invalid inventories, have %d", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			inv, err := inventory.Load(f)
			if err == nil {
				t.Fatalf("Load succeeded; want errors (got %d machines)", len(inv.Machines))
			}
			if inv != nil {
				t.Errorf("Load returned an inventory along with errors")
			}
			golden.Assert(t, strings.TrimSuffix(f, ".yaml")+".err", []byte(err.Error()+"\n"))
			for _, fe := range inventory.FieldErrors(err) {
				if fe.File != f {
					t.Errorf("error names file %q, want %q", fe.File, f)
				}
			}
		})
	}
}

func TestSeveralFaultsReportedTogether(t *testing.T) {
	_, err := inventory.Load("testdata/invalid-many-faults.yaml")
	errs := inventory.FieldErrors(err)
	if len(errs) < 6 {
		t.Fatalf("want every fault of the file in one run, got %d:\n%v", len(errs), err)
	}
	for _, e := range errs {
		if e.Pos.Line == 0 || e.Field == "" {
			t.Errorf("error without position or field: %v", e)
		}
	}
}

func TestDefaults(t *testing.T) {
	inv, err := inventory.Load("testdata/valid-minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := inv.Cluster
	checks := map[string][2]any{
		"talosVersion":         {c.TalosVersion, inventory.DefaultTalosVersion},
		"kubernetesVersion":    {c.KubernetesVersion, inventory.DefaultKubernetesVersion},
		"installImage":         {c.InstallImage, "ghcr.io/siderolabs/installer:v1.11.0"},
		"secrets":              {c.Secrets, "secrets.yaml"},
		"cni":                  {c.Network.CNI, "none"},
		"kubeProxy":            {*c.Network.KubeProxy, false},
		"podSubnets":           {strings.Join(c.Network.PodSubnets, ","), "10.244.0.0/16"},
		"serviceSubnets":       {strings.Join(c.Network.ServiceSubnets, ","), "10.96.0.0/12"},
		"kubeProxyReplacement": {*c.Cilium.KubeProxyReplacement, true},
		"k8sServiceHost":       {c.Cilium.K8sServiceHost, "localhost"},
		"k8sServicePort":       {c.Cilium.K8sServicePort, 7445},
		"port":                 {inv.Machines[0].Port, 50000},
		"endpoint":             {inv.Machines[0].Endpoint(), "10.0.0.11:50000"},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %v, want %v", name, c[0], c[1])
		}
	}
}

func TestAddressPortIsSplit(t *testing.T) {
	inv, err := inventory.Load("testdata/valid-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := inv.Machine("cp-1")
	if m.Address != "10.0.0.11" || m.Port != 50001 {
		t.Errorf("cp-1 address %q port %d, want 10.0.0.11 and 50001", m.Address, m.Port)
	}
	if got := inv.Machine("cp-2").Endpoint(); got != "[fd00::12]:50000" {
		t.Errorf("cp-2 endpoint %q", got)
	}
	if inv.Machine("w-1").Volumes[1].Filesystem != "xfs" {
		t.Errorf("volume filesystem not defaulted to xfs")
	}
	if len(inv.Warnings) != 0 {
		t.Errorf("unexpected warnings: %v", inv.Warnings)
	}
}

func TestEvenControlPlaneCountWarns(t *testing.T) {
	data := []byte(`apiVersion: devata.dev/v1alpha1
kind: Inventory
cluster: {name: lab, endpoint: "https://10.0.0.10:6443"}
machines:
  - {name: cp-1, role: controlplane, address: 10.0.0.11, installDisk: /dev/sda}
  - {name: cp-2, role: controlplane, address: 10.0.0.12, installDisk: /dev/sda}
`)
	inv, err := inventory.Parse(data, "even.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := "even.yaml:4:1: machines: 2 control planes: an even count tolerates no more etcd failures than 1; use an odd number"
	if len(inv.Warnings) != 1 || inv.Warnings[0] != want {
		t.Errorf("warnings = %q, want [%q]", inv.Warnings, want)
	}
}

func TestExampleInventoryIsValid(t *testing.T) {
	inv, err := inventory.Load("../examples/homelab/inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Machines) != 5 || len(inv.ControlPlanes()) != 3 {
		t.Errorf("example: %d machines, %d control planes; want 5 and 3", len(inv.Machines), len(inv.ControlPlanes()))
	}
}

// Nearest offers a candidate at most two edits away, case aside, and the
// first of equals; nothing further off (the "did you mean" of fields,
// --machines and --checks).
func TestNearest(t *testing.T) {
	names := []string{"cp-1", "cp-2", "worker-1", "kubelet"}
	for in, want := range map[string]string{"cp1": "cp-1", "CP-2": "cp-2", "cp-3": "cp-1", "worker1": "worker-1", "kubelt": "kubelet", "storage": "", "": ""} {
		if got := inventory.Nearest(in, names); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", in, got, want)
		}
	}
}
