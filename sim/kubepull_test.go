package sim_test

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

// MachineService.ImagePull, as talosctl upgrade-k8s' pre-pull calls it
// (kubepull.go): a Kubernetes image lands in the namespace asked, on
// v1.11.0 and v1.14.1 alike, and is recorded; a second pull of it is
// recorded too (WithSkipIfAlreadyPulled answers at once); an image the
// registry lacks is NotFound "error pulling image: …", a namespace
// machined does not know InvalidArgument, and neither is recorded.
func TestKubernetesImagePull(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "w-111", Config: wk, TalosVersion: "v1.11.0"},
		sim.MachineSpec{Name: "w-114", Config: wk, TalosVersion: "v1.14.1"},
	)

	for _, name := range []string{"w-111", "w-114"} {
		c := admin(t, f.Machine(name).Addr())
		if err := c.ImagePull(ctxTimeout(t, 5*time.Second), common.ContainerdNamespace_NS_SYSTEM, "ghcr.io/siderolabs/kubelet:v1.34.1"); err != nil { //nolint:staticcheck
			t.Fatalf("%s: kubelet pull: %v", name, err)
		}
		if err := c.ImagePull(ctxTimeout(t, 5*time.Second), common.ContainerdNamespace_NS_CRI, "registry.k8s.io/kube-apiserver:v1.34.1"); err != nil { //nolint:staticcheck
			t.Fatalf("%s: kube-apiserver pull: %v", name, err)
		}
		err := c.ImagePull(ctxTimeout(t, 5*time.Second), common.ContainerdNamespace_NS_CRI, "registry.k8s.io/kube-apiserver:latest") //nolint:staticcheck
		wantStatus(t, name+": a tag the registry lacks", err, codes.NotFound,
			`error pulling image: failed to pull image "registry.k8s.io/kube-apiserver:latest": failed to resolve reference "registry.k8s.io/kube-apiserver:latest": registry.k8s.io/kube-apiserver:latest: not found`)
		err = c.ImagePull(ctxTimeout(t, 5*time.Second), common.ContainerdNamespace_NS_UNKNOWN, "registry.k8s.io/kube-apiserver:v1.34.1") //nolint:staticcheck
		wantStatus(t, name+": no namespace", err, codes.InvalidArgument, "invalid namespace NS_UNKNOWN")

		got := f.Machine(name).ImagePulls()
		want := []sim.ImagePull{
			{Image: "ghcr.io/siderolabs/kubelet:v1.34.1", Namespace: "system"},
			{Image: "registry.k8s.io/kube-apiserver:v1.34.1", Namespace: "k8s.io"},
		}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("%s: pulls %+v, want %+v", name, got, want)
		}
	}
}
