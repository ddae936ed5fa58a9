package netcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/cilium/cilium/api/v1/models"
	"github.com/go-openapi/strfmt"
)

// ParseAgentStatus decodes the reply of `cilium-dbg status -o json` into
// Cilium's own model. A reply in an unexpected shape — not a JSON object,
// fields of the wrong type, values outside the model's enums (a KPR mode of
// an older Cilium such as "Strict"), or without the kube-proxy-replacement or
// kubernetes sections the cilium checks read — is an error: the agent's
// state is then unknown, never assumed.
func ParseAgentStatus(data []byte) (*models.StatusResponse, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, fmt.Errorf("cilium-dbg status: want a JSON object, got %q", head(data))
	}
	var st models.StatusResponse
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("cilium-dbg status: %w", err)
	}
	if err := st.Validate(strfmt.Default); err != nil {
		if k := st.KubeProxyReplacement; k != nil && k.Mode != models.KubeProxyReplacementModeTrue && k.Mode != models.KubeProxyReplacementModeFalse {
			return nil, fmt.Errorf("cilium-dbg status: kube-proxy-replacement mode %q is not one Cilium 1.20 reports (True or False): an agent older than 1.16? (%w)", k.Mode, err)
		}
		return nil, fmt.Errorf("cilium-dbg status: %w", err)
	}
	var missing []string
	if st.KubeProxyReplacement == nil {
		missing = append(missing, "kube-proxy-replacement")
	}
	if st.Kubernetes == nil {
		missing = append(missing, "kubernetes")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("cilium-dbg status: no %s section (is this Cilium 1.20's status -o json?)", strings.Join(missing, " or "))
	}
	return &st, nil
}

func head(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

// EvaluateAgent checks one agent's own status for kube-proxy-free Service
// routing: KPR mode "True" (Cilium 1.20 knows only "True" and "False"),
// NodePort enabled, its Kubernetes connectivity "Ok" and no controller
// failing. Nil or empty means the agent routes Services itself. The next
// steps are phrased for the agent's pod, which the caller knows.
func EvaluateAgent(st *models.StatusResponse) []Problem {
	if st == nil {
		return []Problem{{Reason: "no agent status", Next: "kubectl -n kube-system exec ds/cilium -c cilium-agent -- cilium-dbg status"}}
	}
	const status = "kubectl -n kube-system exec POD -c cilium-agent -- cilium-dbg status --verbose"
	var ps []Problem
	if kpr := st.KubeProxyReplacement; kpr == nil {
		ps = append(ps, Problem{"agent reports no kube-proxy replacement status", status})
	} else {
		if kpr.Mode != models.KubeProxyReplacementModeTrue {
			ps = append(ps, Problem{
				fmt.Sprintf("agent runs with kube-proxy replacement %q", kpr.Mode),
				"kubectl get ciliumnodeconfigs -A -o yaml (an override for this node?) and kubectl -n kube-system get configmap cilium-config -o yaml; then delete the agent pod so it restarts with kube-proxy-replacement: \"true\"",
			})
		}
		if kpr.Features == nil || kpr.Features.NodePort == nil || !kpr.Features.NodePort.Enabled {
			ps = append(ps, Problem{"agent has NodePort disabled", status + " (KubeProxyReplacement Details); kubectl -n kube-system logs POD -c cilium-agent | grep -i nodeport"})
		}
	}
	switch k := st.Kubernetes; {
	case k == nil:
		ps = append(ps, Problem{"agent reports no Kubernetes connectivity status", status})
	case k.State != models.K8sStatusStateOk:
		reason := "agent's Kubernetes connectivity is " + k.State
		if k.Msg != "" {
			reason += ": " + k.Msg
		}
		ps = append(ps, Problem{reason, "the agent reaches the API server through KUBERNETES_SERVICE_HOST/PORT (KubePrism on localhost:7445?): talosctl -n NODE get kubeprismstatuses; kubectl -n kube-system logs POD -c cilium-agent"})
	}
	var failing []string
	for _, c := range st.Controllers {
		if c != nil && c.Status != nil && c.Status.ConsecutiveFailureCount > 0 {
			msg := c.Name
			if c.Status.LastFailureMsg != "" {
				msg += " (" + c.Status.LastFailureMsg + ")"
			}
			failing = append(failing, msg)
		}
	}
	if len(failing) > 0 {
		slices.Sort(failing)
		ps = append(ps, Problem{fmt.Sprintf("%d agent controllers failing: %s", len(failing), strings.Join(failing, ", ")), status + " (Controller Status)"})
	}
	return ps
}
