package reconcile_test

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/reconcile"
)

// A refused sync says what the API server said: Forbidden with its own
// words (the user, the verb, the resource), never client-go's "unknown"
// for a body it did not decode; an Invalid answer names the fields and
// quotes none of the object's values.
func TestSyncManifestsSaysTheAPIServersWords(t *testing.T) {
	env := testenv.Start(t)

	const token = "q7u2ehd0lk3xw9sz"
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
		"metadata":   map[string]any{"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
		"stringData": map[string]any{"token-id": "abcdef", "token-secret": token},
	}}

	cfg, err := env.User("nobody")
	if err != nil {
		t.Fatal(err)
	}

	_, err = reconcile.SyncManifests(t.Context(), kubernetes.NewForConfigOrDie(cfg), []*unstructured.Unstructured{secret}, false)
	if !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "unknown") ||
		!strings.Contains(err.Error(), `User "nobody" cannot get resource "secrets" in API group "" in the namespace "kube-system"`) {
		t.Errorf("a sync without rights: %v; want Forbidden in the API server's words", err)
	}

	if err != nil && strings.Contains(err.Error(), token) {
		t.Error("the refusal quotes the Secret's value")
	}

	// envtest's service range does not hold this address: Invalid
	const ip = "10.254.254.254"
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "pinned", "namespace": "default"},
		"spec":     map[string]any{"clusterIP": ip, "ports": []any{map[string]any{"port": int64(53)}}},
	}}

	_, err = reconcile.SyncManifests(t.Context(), kubernetes.NewForConfigOrDie(env.Config), []*unstructured.Unstructured{svc}, false)
	if !apierrors.IsInvalid(err) || strings.Contains(err.Error(), ip) || !strings.Contains(err.Error(), "spec.clusterIPs") {
		t.Errorf("an invalid Service: %v; want Invalid naming spec.clusterIPs without its value", err)
	}
}
