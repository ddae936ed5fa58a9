package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"devata.dev/devata/internal/simtest"
)

// devata sim's kube-apiserver runs with the inventory's service subnet, as
// a Talos control plane's does (v1.14.1 controllers/k8s/control_plane_final.go:
// --service-cluster-ip-range from the config's service CIDRs), so the
// kube-dns Service Talos applies at boot holds the address its manifest
// pins (k8s.DNSServiceAddrs: the tenth of 10.96.0.0/12, 10.96.0.10). A
// Kubernetes upgrade against it then ends with the manifest sync applying
// that Service unchanged, where a ClusterIP from another range would stop
// it (a Service's ClusterIP cannot change).
func TestSimKubeDNSKeepsTalosAddressThroughAKubernetesUpgrade(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	inv := homelabWithFixtureBundle(t)
	setKubernetesVersion(t, inv, "v1.34.1", "v1.33.5")

	ctx, cancel := context.WithCancel(context.Background())
	var out, errb simtest.Output
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"sim", "-i", inv, "--dir", dir, "--reboot-delay", "300ms"}, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(string) string { return "" })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("sim did not stop on interrupt")
		}
	})
	deadline := time.Now().Add(4 * time.Minute) // a cold kube-apiserver on a loaded machine
	for !strings.Contains(out.String(), "serving until interrupted") {
		select {
		case code := <-done:
			t.Fatalf("sim exited %d:\n%s%s", code, out.String(), errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sim did not start:\n%s%s", out.String(), errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	m := regexp.MustCompile(`(?m)^export KUBECONFIG=(.+)$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("sim printed no KUBECONFIG:\n%s", out.String())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", m[1])
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubeDNS := func() string {
		t.Helper()
		svc, err := kc.CoreV1().Services("kube-system").Get(context.Background(), "kube-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("kube-dns: %v", err)
		}
		return strings.Join(svc.Spec.ClusterIPs, ",")
	}
	if got := kubeDNS(); got != "10.96.0.10" {
		t.Fatalf("kube-dns ClusterIPs %s at start, want Talos' 10.96.0.10", got)
	}

	setKubernetesVersion(t, inv, "v1.33.5", "v1.34.1")
	r := devata(t, nil, "apply", "--yes", "--wait", "2m", "--config", filepath.Join(dir, "devata.yaml"))
	show(t, r)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "apply", r.stdout,
		"kubernetes: v1.33.5 → v1.34.1 by devata apply",
		"==> bootstrap manifests: server-side apply as talosctl upgrade-k8s (field manager talos)",
		"13 objects of cp-1's manifests: 0 created, 0 configured, 13 unchanged")
	if got := kubeDNS(); got != "10.96.0.10" {
		t.Errorf("kube-dns ClusterIPs %s after the upgrade, want 10.96.0.10", got)
	}
}

// setKubernetesVersion rewrites the inventory's cluster.kubernetesVersion.
func setKubernetesVersion(t *testing.T, inv, from, to string) {
	t.Helper()
	data, err := os.ReadFile(inv)
	if err != nil {
		t.Fatal(err)
	}
	old := "kubernetesVersion: " + from + "\n"
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s has no %q", inv, old)
	}
	if err := os.WriteFile(inv, []byte(strings.Replace(string(data), old, "kubernetesVersion: "+to+"\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}
