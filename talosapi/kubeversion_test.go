package talosapi_test

import (
	"testing"

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
	if _, err := talosapi.WithKubeImages(cfgs["cp-1"], map[string]string{"kube-proxy": "x:v1"}); err == nil {
		t.Error("an unknown component was set without error")
	}
}
