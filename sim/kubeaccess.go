package sim

import (
	"bytes"
	"context"
	stdx509 "crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Talos API access from Kubernetes (machine.features.kubernetesTalosAPIAccess),
// as machined runs it on a control plane whose active config enables it
// (Talos v1.11.0 and v1.14.1, internal/app/machined/pkg/controllers/
// kubeaccess: ConfigController, CRDController and serviceaccount/
// crd_controller.go syncHandler; the CRD from k8s/manifest.go's
// "13-talos-service-account-crd"). For each talos.dev/v1alpha1
// ServiceAccount it writes a Secret of the same name holding `config`, a
// talosconfig for endpoint talos.default whose client certificate (6 h,
// renewed when less than 1 h is left, roles in its Organization) the OS CA
// signs, or says in status.failureReason why not.
const (
	kubeAccessCertTTL        = 6 * time.Hour // crd_controller.go certTTL
	kubeAccessRenewThreshold = time.Hour     // certRenewThreshold
	kubeAccessContext        = "default"     // talosconfigContextName
)

var (
	talosSAGVR = schema.GroupVersionResource{
		Group:    constants.ServiceAccountResourceGroup,
		Version:  constants.ServiceAccountResourceVersion,
		Resource: constants.ServiceAccountResourcePlural,
	}
	crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	// crd_controller.go endpoint
	kubeAccessEndpoint = constants.KubernetesTalosAPIServiceName + "." + constants.KubernetesTalosAPIServiceNamespace
)

// kubeAccessSettings are one control plane's kubeaccess.Config.
type kubeAccessSettings struct {
	machine    string
	roles      []string
	namespaces []string
}

// kubeAccessSettings are the settings of every running control plane whose
// active config enables the feature (kubeaccess ConfigController: only the
// active config of a control plane counts), by name.
func (f *Fleet) kubeAccessSettings() []kubeAccessSettings {
	var out []kubeAccessSettings
	for _, m := range f.Machines() {
		s := m.snap()
		if s.down || s.active == nil || s.active.Machine() == nil || !s.active.Machine().Type().IsControlPlane() {
			continue
		}
		c := s.active.K8sTalosAPIAccessConfig()
		if c == nil {
			continue
		}
		out = append(out, kubeAccessSettings{machine: s.name, roles: c.AllowedRoles(), namespaces: c.AllowedKubernetesNamespaces()})
	}
	return out
}

// RunKubeAccess plays Talos' talos.dev ServiceAccount controller against the
// API server cfg reaches (an admin identity: Talos uses the node's
// localhost admin kubeconfig), every interval until ctx ends: each running
// control plane whose config enables kubernetesTalosAPIAccess installs the
// CRD and syncs every talos.dev ServiceAccount with its own settings, as
// each such control plane's machined does (they do not elect a leader).
// osCA must be the fleet's bundle's OS CA (Certs.OS). Errors of a round go
// to onErr (nil: dropped); the next round retries, as Talos' work queue does.
func (f *Fleet) RunKubeAccess(ctx context.Context, cfg *rest.Config, osCA *x509.PEMEncodedCertificateAndKey, interval time.Duration, onErr func(error)) error {
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := f.syncKubeAccess(ctx, kc, dc, osCA); err != nil && onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// SyncKubeAccess is one round of RunKubeAccess.
func (f *Fleet) SyncKubeAccess(ctx context.Context, cfg *rest.Config, osCA *x509.PEMEncodedCertificateAndKey) error {
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return f.syncKubeAccess(ctx, kc, dc, osCA)
}

func (f *Fleet) syncKubeAccess(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface, osCA *x509.PEMEncodedCertificateAndKey) error {
	settings := f.kubeAccessSettings()
	if len(settings) == 0 {
		return nil
	}
	if err := ensureTalosSACRD(ctx, dc); err != nil {
		return err
	}
	list, err := dc.Resource(talosSAGVR).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list talos.dev ServiceAccounts (the CRD may not be served yet): %w", err)
	}
	var errs []error
	for _, s := range settings {
		for i := range list.Items {
			if err := syncTalosSA(ctx, kc, dc, osCA, s, &list.Items[i]); err != nil {
				errs = append(errs, fmt.Errorf("%s: talos.dev ServiceAccount %s/%s: %w", s.machine, list.Items[i].GetNamespace(), list.Items[i].GetName(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// ensureTalosSACRD creates the CRD as k8stemplates.TalosServiceAccountCRDTemplate
// renders it, when it is missing.
func ensureTalosSACRD(ctx context.Context, dc dynamic.Interface) error {
	name := constants.ServiceAccountResourcePlural + "." + constants.ServiceAccountResourceGroup
	if _, err := dc.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{}); err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"conversion": map[string]any{"strategy": "None"},
			"group":      constants.ServiceAccountResourceGroup,
			"names": map[string]any{
				"kind":       constants.ServiceAccountResourceKind,
				"listKind":   constants.ServiceAccountResourceKind + "List",
				"plural":     constants.ServiceAccountResourcePlural,
				"shortNames": []any{constants.ServiceAccountResourceShortName},
				"singular":   constants.ServiceAccountResourceSingular,
			},
			"scope": "Namespaced",
			"versions": []any{map[string]any{
				"name": constants.ServiceAccountResourceVersion, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"spec": map[string]any{"type": "object", "properties": map[string]any{
							"roles": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
						}},
						"status": map[string]any{"type": "object", "properties": map[string]any{
							"failureReason": map[string]any{"type": "string"},
						}},
					},
				}},
			}},
		},
	}}
	_, err := dc.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// syncTalosSA is crd_controller.go syncHandler for one control plane's
// settings, in its order: a Secret of that name it does not control, no
// roles, a namespace not allowed, roles not allowed (each a failureReason
// and no Secret), else the Secret created or brought up to date and the
// failureReason cleared.
func syncTalosSA(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface, osCA *x509.PEMEncodedCertificateAndKey, s kubeAccessSettings, sa *unstructured.Unstructured) error {
	ns, name := sa.GetNamespace(), sa.GetName()
	secret, err := kc.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	notFound := apierrors.IsNotFound(err)
	if err != nil && !notFound {
		return err
	}
	if !notFound && !metav1.IsControlledBy(secret, sa) {
		msg := fmt.Sprintf("Secret already exists and is not managed by controller: %s/%s", ns, name)
		if err := setTalosSAFailure(ctx, dc, sa, msg); err != nil {
			return err
		}
		return errors.New(msg)
	}
	desired, found, err := unstructured.NestedStringSlice(sa.Object, "spec", "roles")
	set, _ := role.Parse(desired) // unknown roles are dropped, as Talos' role.Parse does
	if err != nil || !found || set.Empty() {
		if err := setTalosSAFailure(ctx, dc, sa, "Roles not found"); err != nil {
			return err
		}
		return errors.New("Roles not found") //nolint:staticcheck // Talos' message
	}
	if !slices.Contains(s.namespaces, ns) {
		return setTalosSAFailure(ctx, dc, sa, "Namespace is not allowed: "+ns)
	}
	var refused []string
	for _, r := range desired {
		if !slices.Contains(s.roles, r) {
			refused = append(refused, r)
		}
	}
	if len(refused) > 0 {
		return setTalosSAFailure(ctx, dc, sa, fmt.Sprintf("Roles not allowed: %v", refused))
	}
	switch {
	case notFound:
		cfg, err := kubeAccessTalosconfig(osCA, set)
		if err != nil {
			return err
		}
		owner := metav1.NewControllerRef(sa, sa.GroupVersionKind())
		_, err = kc.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{*owner}},
			Data:       map[string][]byte{constants.TalosconfigFilename: cfg},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	case talosconfigStale(secret, osCA, set.Strings()):
		cfg, err := kubeAccessTalosconfig(osCA, set)
		if err != nil {
			return err
		}
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		secret.Data[constants.TalosconfigFilename] = cfg
		if _, err := kc.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return setTalosSAFailure(ctx, dc, sa, "")
}

// setTalosSAFailure is updateTalosSAStatus: status.failureReason set, or
// removed when reason is "". The CRD has no status subresource, so the
// object itself is updated; unchanged objects are left alone.
func setTalosSAFailure(ctx context.Context, dc dynamic.Interface, sa *unstructured.Unstructured, reason string) error {
	old, _, _ := unstructured.NestedString(sa.Object, "status", "failureReason")
	if old == reason {
		return nil
	}
	c := sa.DeepCopy()
	if reason == "" {
		unstructured.RemoveNestedField(c.Object, "status", "failureReason")
	} else if err := unstructured.SetNestedField(c.Object, reason, "status", "failureReason"); err != nil {
		return err
	}
	_, err := dc.Resource(talosSAGVR).Namespace(c.GetNamespace()).Update(ctx, c, metav1.UpdateOptions{})
	return err
}

// kubeAccessTalosconfig is generateTalosconfig.
func kubeAccessTalosconfig(osCA *x509.PEMEncodedCertificateAndKey, roles role.Set) ([]byte, error) {
	crt, err := secrets.NewAdminCertificateAndKey(time.Now(), osCA, roles, kubeAccessCertTTL)
	if err != nil {
		return nil, err
	}
	return clientconfig.NewConfig(kubeAccessContext, []string{kubeAccessEndpoint}, osCA.Crt, crt).Bytes()
}

// talosconfigStale is needsUpdate: the talosconfig is missing or unreadable,
// of another CA or endpoint, its certificate valid too long, due for
// renewal, or of other roles.
func talosconfigStale(secret *corev1.Secret, osCA *x509.PEMEncodedCertificateAndKey, roles []string) bool {
	data, ok := secret.Data[constants.TalosconfigFilename]
	if !ok {
		return true
	}
	cfg, err := clientconfig.ReadFrom(bytes.NewReader(data))
	if err != nil {
		return true
	}
	ctx := cfg.Contexts[cfg.Context]
	if ctx == nil {
		return true
	}
	ca, err := base64.StdEncoding.DecodeString(ctx.CA)
	if err != nil || !bytes.Equal(ca, osCA.Crt) {
		return true
	}
	if len(ctx.Endpoints) != 1 || ctx.Endpoints[0] != kubeAccessEndpoint {
		return true
	}
	crtPEM, err := base64.StdEncoding.DecodeString(ctx.Crt)
	if err != nil {
		return true
	}
	block, _ := pem.Decode(crtPEM)
	if block == nil {
		return true
	}
	crt, err := stdx509.ParseCertificate(block.Bytes)
	if err != nil || crt.NotAfter.IsZero() {
		return true
	}
	now := time.Now()
	if now.Add(kubeAccessCertTTL).Before(crt.NotAfter) || now.Add(kubeAccessRenewThreshold).After(crt.NotAfter) {
		return true
	}
	have := slices.Sorted(slices.Values(crt.Subject.Organization))
	want := slices.Sorted(slices.Values(roles))
	return !slices.Equal(have, want)
}
