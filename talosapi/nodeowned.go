package talosapi

import (
	"encoding/json"
	"errors"
)

// Annotations listing the label and taint keys devata set on a Node
// through the Kubernetes API (the inventory's viaKubernetes), as a sorted
// JSON array: devata's counterpart of Talos' talos.dev/owned-labels and
// owned-taints (v1.14.1 internal/app/machined/pkg/controllers/k8s/
// node_apply.go, syncOnce). reconcile writes them; the kubelet check reads
// them to tell a key devata still owns but no longer declares.
const (
	OwnedLabelsAnnotation = "devata.dev/owned-labels"
	OwnedTaintsAnnotation = "devata.dev/owned-taints"
)

// ErrOwnedAnnotation is an owned-keys annotation that is no JSON list of
// strings. Its content is never quoted: it came from the cluster.
var ErrOwnedAnnotation = errors.New("is not a JSON list of keys")

// OwnedKeys reads an owned-keys annotation's value: nil when it is empty
// (or absent), ErrOwnedAnnotation when it cannot be read.
func OwnedKeys(raw string) ([]string, error) {
	if raw == "" {
		return nil, nil
	}
	var keys []string
	if err := json.Unmarshal([]byte(raw), &keys); err != nil {
		return nil, ErrOwnedAnnotation
	}
	return keys, nil
}
