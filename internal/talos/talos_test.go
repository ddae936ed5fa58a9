package talos_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"devata.dev/devata/internal/talos"
)

// The support table is held to machinery v1.14.1's own data: each
// release's Kubernetes window is exactly what compatibility allows (its
// ends in, the minors beyond them out), the newest release's default
// Kubernetes is constants.DefaultKubernetesVersion, and every document
// kind the table dates is one machinery registers.
func TestSupportTable(t *testing.T) {
	if n := len(talos.Releases); n != talos.NewestMinor-talos.OldestMinor+1 {
		t.Fatalf("%d releases in the table for 1.%d to 1.%d", n, talos.OldestMinor, talos.NewestMinor)
	}
	supported := func(talos, kube string) bool {
		tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talos})
		if err != nil {
			t.Fatal(err)
		}
		kv, err := compatibility.ParseKubernetesVersion(kube)
		if err != nil {
			t.Fatal(err)
		}
		return kv.SupportedWith(tv) == nil
	}
	minor := func(v string, delta int) string {
		var maj, min int
		if _, err := fmt.Sscanf(v, "%d.%d", &maj, &min); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		return fmt.Sprintf("%d.%d.0", maj, min+delta)
	}
	for _, r := range talos.Releases {
		version := fmt.Sprintf("v1.%d.0", r.Minor)
		oldest, newest := r.Kubernetes[0], r.Kubernetes[1]
		for _, c := range []struct {
			kube string
			want bool
		}{
			{minor(oldest, 0), true}, {minor(newest, 0), true},
			{minor(oldest, -1), false}, {minor(newest, 1), false},
		} {
			if got := supported(version, c.kube); got != c.want {
				t.Errorf("Talos 1.%d with Kubernetes %s: machinery says supported=%t, the table %t", r.Minor, c.kube, got, c.want)
			}
		}
		if rel, ok := talos.ReleaseOf(version); !ok || rel.Minor != r.Minor {
			t.Errorf("ReleaseOf(%s) = %+v, %t", version, rel, ok)
		}
	}
	newest := talos.Releases[len(talos.Releases)-1]
	if newest.DefaultKubernetes != constants.DefaultKubernetesVersion {
		t.Errorf("Talos 1.%d defaults to Kubernetes %s in the table, machinery %s", newest.Minor, newest.DefaultKubernetes, constants.DefaultKubernetesVersion)
	}
	perRelease := map[int]int{}
	for kind, since := range talos.DocumentKinds {
		perRelease[since]++
		_, err := configloader.NewFromBytes([]byte("apiVersion: v1alpha1\nkind: " + kind + "\n"))
		if err != nil && strings.Contains(err.Error(), "not registered") {
			t.Errorf("%s (Talos 1.%d in the table): machinery v1.14.1 does not register it: %v", kind, since, err)
		}
	}
	// counted in each release's registry.Register calls
	for minor, want := range map[int]int{11: 17, 12: 19, 13: 8, 14: 45} {
		if perRelease[minor] != want {
			t.Errorf("Talos 1.%d: %d kinds in the table, %d registered", minor, perRelease[minor], want)
		}
	}
	if _, err := configloader.NewFromBytes([]byte("apiVersion: v1alpha1\nkind: NoSuchConfig\n")); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("the registration probe does not tell: %v", err)
	}
}

func TestDefaultInstallImage(t *testing.T) {
	for v, want := range map[string]string{
		"v1.11.0": "ghcr.io/siderolabs/installer:v1.11.0",
		"v1.13.9": "ghcr.io/siderolabs/installer:v1.13.9",
		"v1.14.1": "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1",
	} {
		if got := talos.DefaultInstallImage(v); got != want {
			t.Errorf("DefaultInstallImage(%s) = %s, want %s", v, got, want)
		}
	}
}
