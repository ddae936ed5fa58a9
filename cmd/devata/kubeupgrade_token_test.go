package main

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"devata.dev/devata/internal/simtest"
)

// The bootstrap manifests sort the kubelet's bootstrap token Secret first
// (00-kubelet-bootstrapping-token, rendered from cluster.token as Talos
// does). Someone changed its token-secret in the cluster: devata plan's
// dry run and devata apply's sync after a Kubernetes upgrade name the
// Secret and what they do to it, bring it back to the manifest, and never
// print the token, the changed value or the bundle's other secrets, in
// clear or base64, on stdout or stderr (-v included).
func TestKubernetesUpgradeNeverPrintsTheBootstrapToken(t *testing.T) {
	sf, k, kubeconfig := startOnKubernetes(t, "v1.33.5")
	ctx := t.Context()

	id, secret, ok := strings.Cut(sf.Bundle.Secrets.BootstrapToken, ".")
	if !ok || secret == "" {
		t.Fatalf("the bundle's bootstrap token has no secret part")
	}

	name := "bootstrap-token-" + id
	secrets := k.kc.CoreV1().Secrets("kube-system")
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err == nil && string(s.Data["token-secret"]) == secret {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no Secret %s holding cluster.token from Talos' boot-time apply: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	const changed = "zzzzzzzzchanged1"
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data["token-secret"] = []byte(changed)
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	never := []string{secret, changed, base64.StdEncoding.EncodeToString([]byte(secret)), base64.StdEncoding.EncodeToString([]byte(changed))}
	never = append(never, simtest.BundleSecrets(sf.Bundle)...)
	leaks := func(what, out string) {
		t.Helper()
		for _, s := range never {
			if strings.Contains(out, s) {
				t.Errorf("%s prints a secret value (%d characters)", what, len(s))
			}
		}
	}

	cfg := []string{"--config", sf.settings, kubeconfig}
	r := devata(t, nil, append([]string{"plan", "-v"}, cfg...)...)
	show(t, r)
	lacks(t, "plan", r.stdout, "would be configured v1 Secret kube-system/"+name+"\n")
	leaks("plan", r.stdout+r.err)

	r = devata(t, nil, append([]string{"plan", "-o", "json"}, cfg...)...)
	lacks(t, "plan -o json", r.stdout, "would be configured v1 Secret kube-system/"+name)
	leaks("plan -o json", r.stdout+r.err)

	r = devata(t, nil, append([]string{"apply", "--yes", "-v", "--wait", "1m"}, cfg...)...)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "apply", r.stdout, "==> bootstrap manifests: server-side apply", "    configured v1 Secret kube-system/"+name+"\n")
	leaks("apply", r.stdout+r.err)

	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil || string(s.Data["token-secret"]) != secret {
		t.Errorf("after the sync the Secret does not hold cluster.token again (%v)", err)
	}
}
