package testenv

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

// TalosAPIVersions are the Talos releases whose own API integration suites
// (github.com/siderolabs/talos/internal/integration, the test binary Talos'
// CI runs against a cluster) run against the sim. Each is built once with
// go test -c from a wrapper module of its own under build/
// (talosapi-<version>) holding the replace directives of that release's
// go.mod, with served versions in place of the pins the Go module proxy
// does not serve, as the talosctl of the same release.
var TalosAPIVersions = []string{"v1.11.0", "v1.14.1"}

// TalosAPITags are the build tags Talos' Makefile gives the integration
// test binary (integration-test target): the API suites, and Kubernetes
// discovery of the nodes through the kubeconfig the cluster serves.
const TalosAPITags = "integration,integration_api,integration_k8s"

func talosAPIBinary(version string) (binary, error) {
	if !slices.Contains(TalosAPIVersions, version) {
		return binary{}, fmt.Errorf("testbin: no wrapper module for Talos %s's integration suites (have %s)", version, strings.Join(TalosAPIVersions, ", "))
	}

	estimate := "13 CPU-minutes measured: about 7-10 minutes on 2 idle cores, far longer on a loaded machine"
	if version == "v1.11.0" {
		// most of its packages are talosctl v1.11.0's, which CI builds first
		estimate = "3 CPU-minutes measured after talosctl v1.11.0 (6 minutes on 2 loaded cores)"
	}

	return binary{
		name:     "talos-integration-" + version,
		module:   "talosapi-" + version,
		pkg:      "github.com/siderolabs/talos/internal/integration",
		version:  version,
		estimate: estimate,
		testTags: TalosAPITags,
	}, nil
}

// TalosAPISuites returns the path of Talos' API integration test binary of
// version, one of TalosAPIVersions, building it into the cache directory
// first if needed (locked, once). Only the talosapi-tagged tests use it.
func TalosAPISuites(ctx context.Context, version string, progress io.Writer) (string, error) {
	b, err := talosAPIBinary(version)
	if err != nil {
		return "", err
	}

	return buildOnce(ctx, b, progress)
}
