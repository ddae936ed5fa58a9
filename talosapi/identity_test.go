package talosapi_test

import (
	"bytes"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/render"
	"devata.dev/devata/talosapi"
)

// Identities of the homelab's rendered configs: each machine is itself;
// another machine of the inventory, another bundle's config, or a
// control plane where a worker should be are mismatches; a hostname set
// by hand to a name the inventory does not have is drift, not another
// machine.
func TestCompareIdentity(t *testing.T) {
	f := simtest.Start(t, simtest.Options{})
	id := func(cfg []byte) talosapi.Identity {
		t.Helper()
		got, err := talosapi.IdentityOf(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	isOther := func(self string) func(string) bool {
		return func(name string) bool { return name != self && f.Inventory.Machine(name) != nil }
	}
	w1, w2, cp1 := id(f.Desired["worker-1"]), id(f.Desired["worker-2"]), id(f.Desired["cp-1"])
	if w1.ClusterID == "" || w1.OSCA == "" || w1.KubernetesCA == "" || w1.Type != "worker" || w1.Hostname != "worker-1" || cp1.EtcdCA == "" || cp1.Type != "controlplane" {
		t.Fatalf("identities not read: worker-1 %+v, cp-1 %+v", w1, cp1)
	}

	b, err := render.NewSecrets(f.Inventory.Cluster.TalosVersion)
	if err != nil {
		t.Fatal(err)
	}
	r, err := render.NewRenderer(f.Inventory, b)
	if err != nil {
		t.Fatal(err)
	}
	other, err := r.Render(f.Inventory.Machine("worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	renamed := id(bytes.Replace(f.Desired["worker-1"], []byte("hostname: worker-1"), []byte("hostname: intruder"), 1))
	if renamed.Hostname != "intruder" {
		t.Fatalf("the hostname edit did not take: %+v", renamed)
	}

	for _, tc := range []struct {
		name             string
		running, desired talosapi.Identity
		self             string
		bundle, machine  string // "" for none; else a part of the mismatch
	}{
		{"itself", w1, w1, "worker-1", "", ""},
		{"another worker of the inventory", w2, w1, "worker-1", "", "hostname worker-2, not worker-1 (it is the inventory's worker-2)"},
		{"a control plane where a worker should be", cp1, w1, "worker-1", "", "machine.type controlplane, not worker"},
		{"another bundle's config", id(other.Config), w1, "worker-1", "machine.ca (OS CA) sha256", ""},
		{"a hostname set by hand", renamed, w1, "worker-1", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := talosapi.CompareIdentity(tc.running, tc.desired, isOther(tc.self))
			bundle, machine := strings.Join(m.Bundle, "; "), strings.Join(m.Machine, "; ")
			if (tc.bundle == "") != (bundle == "") || !strings.Contains(bundle, tc.bundle) {
				t.Errorf("bundle mismatch %q, want %q", bundle, tc.bundle)
			}
			if (tc.machine == "") != (machine == "") || !strings.Contains(machine, tc.machine) {
				t.Errorf("machine mismatch %q, want %q", machine, tc.machine)
			}
			if m.Any() != (tc.bundle != "" || tc.machine != "") {
				t.Errorf("Any() = %t", m.Any())
			}
		})
	}
}
