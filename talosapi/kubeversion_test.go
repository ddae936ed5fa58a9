package talosapi_test

import (
	"os"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
	"devata.dev/devata/talosapi"
)

func TestImageTag(t *testing.T) {
	for image, want := range map[string]string{
		"ghcr.io/siderolabs/installer:v1.11.0": "v1.11.0",
		"factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.11.0": "v1.11.0",
		"registry.local:5000/installer:v1.10.6":            "v1.10.6",
		"registry.local:5000/installer@sha256:0123":        "",
		"ghcr.io/siderolabs/installer:v1.11.0@sha256:0123": "v1.11.0",
	} {
		if got := talosapi.ImageTag(image); got != want {
			t.Errorf("ImageTag(%s) = %q, want %q", image, got, want)
		}
	}
}

func TestKubeComponentsOf(t *testing.T) {
	cfgs := renderedExample(t)

	cp, err := talosapi.KubeComponentsOf(cfgs["cp-1"])
	if err != nil {
		t.Fatal(err)
	}
	want := talosapi.KubeComponents{
		ControlPlane: true,
		Kubelet:      "ghcr.io/siderolabs/kubelet:v1.34.1",
		APIServer:    "registry.k8s.io/kube-apiserver:v1.34.1", ControllerManager: "registry.k8s.io/kube-controller-manager:v1.34.1",
		Scheduler: "registry.k8s.io/kube-scheduler:v1.34.1",
	}
	if cp != want {
		t.Errorf("cp-1: %+v, want %+v", cp, want)
	}
	if v := cp.Versions(); len(v) != 1 || v[0] != "v1.34.1" {
		t.Errorf("cp-1 versions %v, want [v1.34.1]", v)
	}

	w, err := talosapi.KubeComponentsOf(cfgs["worker-1"])
	if err != nil {
		t.Fatal(err)
	}
	if w.ControlPlane || w.APIServer != "" || w.Kubelet != want.Kubelet || w.ControlPlaneImages() != nil {
		t.Errorf("worker-1: %+v; want the kubelet only", w)
	}

	held, err := talosapi.WithKubeImages(cfgs["cp-1"], map[string]string{talosapi.Kubelet: "ghcr.io/siderolabs/kubelet:v1.33.5"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := talosapi.KubeComponentsOf(held)
	if err != nil {
		t.Fatal(err)
	}
	want.Kubelet = "ghcr.io/siderolabs/kubelet:v1.33.5"
	if got != want {
		t.Errorf("with the kubelet held: %+v, want %+v", got, want)
	}
	if v := got.Versions(); len(v) != 2 {
		t.Errorf("versions %v, want two", v)
	}
	d, err := talosapi.DiffConfigs(held, cfgs["cp-1"])
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Changes) != 1 {
		t.Errorf("held vs desired: changes %v, want only the kubelet image", d.Changes)
	}

	if _, err := talosapi.KubeComponentsOf([]byte("not: [a config")); err == nil {
		t.Error("a broken config read without error")
	}
}

func TestWithKubeImages(t *testing.T) {
	cfgs := renderedExample(t)
	held := map[string]string{
		talosapi.KubeAPIServer: "registry.k8s.io/kube-apiserver:v1.33.5",
		talosapi.KubeScheduler: "registry.k8s.io/kube-scheduler:v1.33.5",
	}
	out, err := talosapi.WithKubeImages(cfgs["cp-1"], held)
	if err != nil {
		t.Fatal(err)
	}
	got, err := talosapi.KubeComponentsOf(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range talosapi.KubeOrder {
		want := "v1.34.1"
		if _, ok := held[c]; ok {
			want = "v1.33.5"
		}
		if tag := talosapi.ImageTag(got.Image(c)); tag != want {
			t.Errorf("%s runs %s, want %s", c, got.Image(c), want)
		}
	}
	d, err := talosapi.DiffConfigs(out, cfgs["cp-1"])
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Changes) != 2 {
		t.Errorf("changes %v, want the two images only", d.Changes)
	}
	same, err := talosapi.WithKubeImages(cfgs["worker-1"], nil)
	if err != nil || string(same) != string(cfgs["worker-1"]) {
		t.Errorf("no images: the config changed (%v)", err)
	}
	if _, err := talosapi.WithKubeImages(cfgs["cp-1"], map[string]string{"kube-dns": "x:v1"}); err == nil {
		t.Error("an unknown component was set without error")
	}
}

// renderedV114 is examples/homelab-v1.14 (Talos v1.14.1) rendered with the
// fixture bundle, on Kubernetes kubeVersion, with kube-proxy on when proxy.
func renderedV114(t *testing.T, kubeVersion string, proxy bool) map[string][]byte {
	t.Helper()
	path, err := examples.WriteExample(t.TempDir(), examples.HomelabV114Name)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(raw), "kubernetesVersion: v1.37.0", "kubernetesVersion: "+kubeVersion, 1)
	if proxy {
		text = strings.Replace(text, "kubeProxy: false", "kubeProxy: true", 1)
		text = strings.Replace(text, "kubeProxyReplacement: true", "kubeProxyReplacement: false", 1)
	}
	if !strings.Contains(string(raw), "kubernetesVersion: v1.37.0") || (proxy && !strings.Contains(text, "kubeProxy: true")) {
		t.Fatal("the example's inventory no longer says kubernetesVersion: v1.37.0, kubeProxy: false: update renderedV114")
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := render.LoadSecrets(simtest.FixtureSecrets())
	if err != nil {
		t.Fatal(err)
	}
	out, err := render.Render(inv, b)
	if err != nil {
		t.Fatal(err)
	}
	cfgs := map[string][]byte{}
	for _, r := range out {
		cfgs[r.Machine] = r.Config
	}
	return cfgs
}

// WithKubeImages sets each image where the config holds it, as talosctl
// upgrade-k8s' stdpatches do: on a Talos 1.14 config, in the component's
// document (KubeAPIServerConfig, …, KubeProxyConfig; cp-1) or in
// machine.kubelet where the machine keeps its kubelet in v1alpha1 for its
// extra mounts (worker-1, render/contract.go); on a Talos 1.11 config, in
// the v1alpha1 fields. The result validates as Talos validates an applied
// config, which refuses a v1alpha1 field beside its document (machinery
// config/container validate.go validate, KubeletConfigV1Alpha1 and the
// others' V1Alpha1ConflictValidate: "kubelet config is already set in
// v1alpha1 config"), and differs from the input in the images only.
func TestWithKubeImagesWhereTheConfigHoldsThem(t *testing.T) {
	v114 := renderedV114(t, "v1.37.0", true)
	v111 := renderedExample(t) // examples/homelab, Talos v1.11.0
	tests := []struct {
		name, old string
		cfg       []byte
		images    []string // the components set
		// inDocument: each change is in a Kubernetes document, none in v1alpha1
		inDocument bool
	}{
		{"1.14 control plane", "v1.36.3", v114["cp-1"], []string{talosapi.KubeAPIServer, talosapi.KubeControllerManager, talosapi.KubeScheduler, talosapi.Kubelet, talosapi.KubeProxy}, true},
		{"1.14 control plane, kube-apiserver only", "v1.36.3", v114["cp-2"], []string{talosapi.KubeAPIServer}, true},
		{"1.14 worker with kubelet mounts", "v1.36.3", v114["worker-1"], []string{talosapi.Kubelet}, false},
		{"1.11 control plane", "v1.33.5", v111["cp-1"], []string{talosapi.KubeAPIServer, talosapi.KubeControllerManager, talosapi.KubeScheduler, talosapi.Kubelet}, false},
		{"1.11 worker", "v1.33.5", v111["worker-1"], []string{talosapi.Kubelet}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := talosapi.KubeComponentsOf(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			images := map[string]string{}
			for _, c := range tt.images {
				img := before.Image(c)
				if c == talosapi.KubeProxy {
					img = "registry.k8s.io/kube-proxy:v1.37.0"
				}
				if img == "" {
					t.Fatalf("the config runs no %s", c)
				}
				images[c] = strings.TrimSuffix(img, talosapi.ImageTag(img)) + tt.old
			}
			out, err := talosapi.WithKubeImages(tt.cfg, images)
			if err != nil {
				t.Fatal(err)
			}
			validates(t, out)
			after, err := talosapi.KubeComponentsOf(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range talosapi.KubeOrder {
				want := before.Image(c)
				if img, ok := images[c]; ok {
					want = img
				}
				if after.Image(c) != want {
					t.Errorf("%s runs %q, want %q", c, after.Image(c), want)
				}
			}
			d, err := talosapi.DiffConfigs(tt.cfg, out)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Changes) != len(images) {
				t.Errorf("changes %v, want the %d images only", d.Changes, len(images))
			}
			for _, ch := range d.Changes {
				v1alpha1 := strings.HasPrefix(ch, "machine.") || strings.HasPrefix(ch, "cluster.")
				if !strings.Contains(ch, tt.old) || v1alpha1 == tt.inDocument {
					t.Errorf("change %s: want an image set to %s in a %s", ch, tt.old, map[bool]string{true: "Kubernetes document", false: "v1alpha1 field"}[tt.inDocument])
				}
			}
			if _, ok := images[talosapi.KubeProxy]; ok {
				c, err := configloader.NewFromBytes(out)
				if err != nil {
					t.Fatal(err)
				}
				if got := c.K8sProxyConfig().Image(); got != images[talosapi.KubeProxy] {
					t.Errorf("kube-proxy runs %q, want %q", got, images[talosapi.KubeProxy])
				}
			}
		})
	}
}

// metal is a bare-metal Talos' validation mode (machinery
// config/validation mode.go RuntimeMode), as a configured machine
// validates an applied config.
type metal struct{}

func (metal) String() string        { return "metal" }
func (metal) RequiresInstall() bool { return false }
func (metal) InContainer() bool     { return false }

// validates fails t unless cfg loads and validates as Talos does an
// applied config (sim/apply.go loadApplied does the same).
func validates(t *testing.T, cfg []byte) {
	t.Helper()
	c, err := configloader.NewFromBytes(cfg)
	if err != nil {
		t.Fatalf("the patched config does not load: %v", err)
	}
	if _, err := c.Validate(metal{}, validation.WithLocal()); err != nil {
		t.Fatalf("Talos refuses the patched config: %v", err)
	}
}

// The patch devata wrote before it looked where the config holds the
// images: a v1alpha1 machine.kubelet.image beside Talos 1.14's
// KubeletConfig document, which Talos refuses (container validate.go
// validate, KubeletConfigV1Alpha1.V1Alpha1ConflictValidate).
func TestKubeletImageInV1Alpha1BesideItsDocumentIsRefused(t *testing.T) {
	cp := renderedV114(t, "v1.37.0", false)["cp-1"]
	validates(t, cp)
	mixed := simtest.Patch(t, cp, "machine:\n  kubelet:\n    image: ghcr.io/siderolabs/kubelet:v1.36.3\n")
	c, err := configloader.NewFromBytes(mixed)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Validate(metal{}, validation.WithLocal())
	if err == nil || !strings.Contains(err.Error(), "kubelet config is already set in v1alpha1 config") {
		t.Fatalf("the mixed config validated with %v, want the conflict refused", err)
	}
}
