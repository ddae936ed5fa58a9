package netcheck_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/cilium/api/v1/models"

	"devata.dev/devata/internal/golden"
	"devata.dev/devata/netcheck"
)

// healthyStatus is a Cilium 1.20 agent with kube-proxy replacement on, as
// cilium-dbg status -o json reports it (the parts netcheck reads, and a few
// around them).
func healthyStatus() *models.StatusResponse {
	return &models.StatusResponse{
		Cilium: &models.Status{State: models.StatusStateOk, Msg: "Ok   1.20.2"},
		KubeProxyReplacement: &models.KubeProxyReplacement{
			Mode:    models.KubeProxyReplacementModeTrue,
			Devices: []string{"eth0"},
			Features: &models.KubeProxyReplacementFeatures{
				NodePort: &models.KubeProxyReplacementFeaturesNodePort{
					Enabled: true, Mode: "SNAT", Algorithm: "Random", Acceleration: "None", PortMin: 30000, PortMax: 32767,
				},
				HostPort:    &models.KubeProxyReplacementFeaturesHostPort{Enabled: true},
				ExternalIPs: &models.KubeProxyReplacementFeaturesExternalIPs{Enabled: true},
				SocketLB:    &models.KubeProxyReplacementFeaturesSocketLB{Enabled: true},
			},
		},
		Kubernetes: &models.K8sStatus{State: models.K8sStatusStateOk, Msg: "1.34 (v1.34.1) [linux/amd64]", K8sAPIVersions: []string{"cilium/v2::CiliumNode", "core/v1::Pods"}},
		Controllers: models.ControllerStatuses{
			{Name: "sync-lb-maps-with-k8s-services", Status: &models.ControllerStatusStatus{SuccessCount: 12}},
			{Name: "endpoint-gc", Status: &models.ControllerStatusStatus{SuccessCount: 3}},
		},
	}
}

// fixture returns the JSON of st, checked against (or, with -update,
// written to) testdata/name: the fixtures are cilium's models marshalled.
func fixture(t *testing.T, name string, st *models.StatusResponse) []byte {
	t.Helper()
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, '\n')
	if !golden.Assert(t, filepath.Join("testdata", name), data) {
		t.FailNow() // the fixture is not cilium's models marshalled
	}
	return data
}

func TestAgentStatus(t *testing.T) {
	kprOff := healthyStatus()
	kprOff.KubeProxyReplacement.Mode = models.KubeProxyReplacementModeFalse
	kprOff.KubeProxyReplacement.Features.NodePort.Enabled = false
	broken := healthyStatus()
	broken.Kubernetes = &models.K8sStatus{State: models.K8sStatusStateFailure, Msg: "dial tcp 127.0.0.1:7445: connect: connection refused"}
	broken.Controllers = append(broken.Controllers, &models.ControllerStatus{Name: "cilium-health-ep", Status: &models.ControllerStatusStatus{ConsecutiveFailureCount: 4, FailureCount: 9, LastFailureMsg: "endpoint not ready"}})

	for _, tt := range []struct {
		name string
		st   *models.StatusResponse
		want []string // reasons, in order
	}{
		{"agent-status-healthy.json", healthyStatus(), nil},
		{"agent-status-kpr-false.json", kprOff, []string{`agent runs with kube-proxy replacement "False"`, "agent has NodePort disabled"}},
		{"agent-status-k8s-failing.json", broken, []string{"agent's Kubernetes connectivity is Failure: dial tcp 127.0.0.1:7445: connect: connection refused", "1 agent controllers failing: cilium-health-ep (endpoint not ready)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, err := netcheck.ParseAgentStatus(fixture(t, tt.name, tt.st))
			if err != nil {
				t.Fatal(err)
			}
			ps := netcheck.EvaluateAgent(st)
			var got []string
			for _, p := range ps {
				got = append(got, p.Reason)
				if p.Next == "" {
					t.Errorf("%q has no next step", p.Reason)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestAgentStatusUnexpectedShape(t *testing.T) {
	for _, tt := range []struct{ name, data, want string }{
		{"empty", "", "want a JSON object"},
		{"text", "Error: cannot reach agent: Get \"http:///var/run/cilium/cilium.sock/v1/healthz\"", "want a JSON object"},
		{"array", `[{"kube-proxy-replacement": {"mode": "True"}}]`, "want a JSON object"},
		{"wrong type", `{"kube-proxy-replacement": "True", "kubernetes": {"state": "Ok"}}`, "cannot unmarshal"},
		{"pre-1.16 mode", `{"kube-proxy-replacement": {"mode": "Strict"}, "kubernetes": {"state": "Ok"}}`, "mode"},
		{"no kpr", `{"kubernetes": {"state": "Ok"}}`, "no kube-proxy-replacement section"},
		{"truncated", `{"kube-proxy-replacement": {"mode": "Tr`, "unexpected end of JSON input"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, err := netcheck.ParseAgentStatus([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, %v; want an error with %q", st, err, tt.want)
			}
		})
	}
}
