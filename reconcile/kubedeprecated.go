package reconcile

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// Before a Kubernetes minor upgrade devata reads which deprecated APIs
// clients still request, from the API server's own record: the gauge
// apiserver_requested_deprecated_apis{group, version, resource,
// subresource, removed_release} on its /metrics (k8s.io/apiserver v0.37.2
// endpoints/metrics/metrics.go deprecatedRequestGauge, set to 1 by
// MonitorRequest for every request to an API whose type says it is
// deprecated in the server's release; removed_release comes from the
// type's APILifecycleRemoved, endpoints/installer.go registerResourceHandlers
// and deprecation.RemovedRelease). A CRD version marked deprecated is
// recorded too, with no removed_release (apiextensions-apiserver
// customresource_handler.go ServeHTTP): nothing says which release drops it,
// so it never refuses an upgrade.
//
// talosctl upgrade-k8s (v1.14.1 pkg/cluster/kubernetes/talos_managed.go
// Upgrade → go-kubernetes v0.2.41 upgrade/checks.go Checks.Run) does
// something narrower: for each upgrade path it has a hand-kept list of
// removed resources and refuses when objects of them are stored
// (PopulateRemovedAPIResources). The metric covers what the server itself
// knows is going, and clients, not only stored objects: a controller that
// still lists a removed version breaks on the new release even when
// nothing is stored in it. The gauge lives since the API server started:
// a client that asks once a day is seen only after it asked.

// DeprecatedAPI is one deprecated API the API server saw requested.
type DeprecatedAPI struct {
	Group, Version, Resource, Subresource string
	// RemovedRelease is "1.38"; empty when no release is named.
	RemovedRelease string
}

// String is group/version resource, as kubectl names it.
func (d DeprecatedAPI) String() string {
	gv := d.Version
	if d.Group != "" {
		gv = d.Group + "/" + d.Version
	}
	r := d.Resource
	if d.Subresource != "" {
		r += "/" + d.Subresource
	}
	return gv + " " + r
}

// RemovedBy reports whether the API is gone in Kubernetes version to
// ("v1.38.0"): its removed release is at or below to's minor.
func (d DeprecatedAPI) RemovedBy(to string) bool {
	if d.RemovedRelease == "" {
		return false
	}
	v, err := semver.ParseTolerant(to)
	if err != nil {
		return false
	}
	major, minor, ok := strings.Cut(d.RemovedRelease, ".")
	if !ok {
		return false
	}
	ma, err1 := strconv.ParseUint(major, 10, 64)
	mi, err2 := strconv.ParseUint(minor, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return v.Major > ma || v.Major == ma && v.Minor >= mi
}

// RequestedDeprecatedAPIs reads the API server's /metrics through the
// Kubernetes API (the caller needs `get` on the non-resource URL
// /metrics) and returns every deprecated API it recorded as requested.
func RequestedDeprecatedAPIs(ctx context.Context, kube kubernetes.Interface) ([]DeprecatedAPI, error) {
	raw, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API server's /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse the API server's /metrics: %w", err)
	}
	mf := families["apiserver_requested_deprecated_apis"]
	if mf == nil {
		return nil, nil // nothing deprecated was requested since the server started
	}
	var out []DeprecatedAPI
	for _, m := range mf.GetMetric() {
		if m.GetGauge().GetValue() == 0 {
			continue
		}
		var d DeprecatedAPI
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "group":
				d.Group = l.GetValue()
			case "version":
				d.Version = l.GetValue()
			case "resource":
				d.Resource = l.GetValue()
			case "subresource":
				d.Subresource = l.GetValue()
			case "removed_release":
				d.RemovedRelease = l.GetValue()
			}
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b DeprecatedAPI) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// DeprecatedAPIsRemovedBy returns the deprecated APIs clients still
// request that Kubernetes version to removes.
func DeprecatedAPIsRemovedBy(ctx context.Context, kube kubernetes.Interface, to string) ([]DeprecatedAPI, error) {
	all, err := RequestedDeprecatedAPIs(ctx, kube)
	if err != nil {
		return nil, err
	}
	var out []DeprecatedAPI
	for _, d := range all {
		if d.RemovedBy(to) {
			out = append(out, d)
		}
	}
	return out, nil
}

// deprecatedRefusal says why a Kubernetes upgrade to `to` may not start
// while removed APIs are requested ("" when none is), or that the check
// could not be made.
func deprecatedRefusal(ctx context.Context, kube kubernetes.Interface, to string) string {
	if kube == nil {
		return ""
	}
	found, err := DeprecatedAPIsRemovedBy(ctx, kube, to)
	if err != nil {
		return fmt.Sprintf("the deprecated APIs still requested could not be read (%v): give devata `get` on the non-resource URL /metrics, or pass --force (devata apply or reconcile) to upgrade without the check", err)
	}
	if len(found) == 0 {
		return ""
	}
	var names []string
	for _, d := range found {
		names = append(names, fmt.Sprintf("%s (removed in %s)", d, d.RemovedRelease))
	}
	return fmt.Sprintf("clients still request APIs that Kubernetes %s removes (the API server's apiserver_requested_deprecated_apis): %s; move them to a served version (kubectl get --raw /metrics | grep apiserver_requested_deprecated_apis names each; the API server forgets a request only when it restarts), or pass --force (devata apply or reconcile) to upgrade anyway",
		to, strings.Join(names, ", "))
}
