package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/cilium/api/v1/models"
	"github.com/go-openapi/strfmt"
)

// ciliumDbg answers the cilium-dbg commands netcheck and operators use:
// `status -o json`, `service list -o json` and, through `shell --`,
// `db/show frontends` and `db/get frontends ADDRESS` with `-f json`.
func (f *Fleet) ciliumDbg(ctx context.Context, m *Machine, args []string, out, errw io.Writer) int {
	st, err := f.agentState(ctx, m)
	if err != nil {
		fmt.Fprintf(errw, "Error: Unable to reach the agent's API: %v\n", err)
		return 1
	}

	jsonOut := func(args []string) bool {
		for i, a := range args {
			if a == "-ojson" || a == "--output=json" || ((a == "-o" || a == "--output") && i+1 < len(args) && args[i+1] == "json") {
				return true
			}
		}

		return false
	}

	switch {
	case len(args) >= 1 && args[0] == "status":
		if !jsonOut(args[1:]) {
			fmt.Fprintf(out, "KubeProxyReplacement:   %s\nKubernetes:             %s\n", st.kprMode, st.k8sState)
			return 0
		}

		if s := m.snap().faults.CiliumStatusReply; s != "" {
			io.WriteString(out, s) //nolint:errcheck
			return 0
		}

		return writeJSON(out, errw, st.status())
	case len(args) >= 2 && args[0] == "service" && args[1] == "list":
		if !jsonOut(args[2:]) {
			fmt.Fprintln(errw, "the simulated agent prints service list only with -o json")
			return 1
		}

		return writeJSON(out, errw, st.serviceList())
	case len(args) >= 2 && args[0] == "shell" && args[1] == "--":
		if m.snap().faults.CiliumNoShell {
			fmt.Fprintln(errw, "Error: unknown command \"shell\" for \"cilium-dbg\"")
			return 1
		}

		return st.dbQuery(args[2:], out, errw)
	}

	fmt.Fprintf(errw, "Error: unknown command %q for \"cilium-dbg\"\n", strings.Join(args, " "))

	return 1
}

func writeJSON(out, errw io.Writer, v any) int {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		fmt.Fprintln(errw, err)
		return 1
	}

	out.Write(append(data, '\n')) //nolint:errcheck

	return 0
}

func (st *agentState) status() *models.StatusResponse {
	now := strfmt.DateTime(time.Now().UTC())
	ctrl := func(name string, failing bool) *models.ControllerStatus {
		c := &models.ControllerStatus{Name: name, Status: &models.ControllerStatusStatus{SuccessCount: 12, LastSuccessTimestamp: now}}
		if failing {
			c.Status.ConsecutiveFailureCount, c.Status.FailureCount = 3, 3
			c.Status.LastFailureMsg, c.Status.LastFailureTimestamp = "simulated failure", now
		}

		return c
	}

	resp := &models.StatusResponse{
		Cilium: &models.Status{State: models.StatusStateOk, Msg: "Ok   1.20.2 (simulated)"},
		KubeProxyReplacement: &models.KubeProxyReplacement{
			Mode:    st.kprMode,
			Devices: []string{"eth0"},
			Features: &models.KubeProxyReplacementFeatures{
				NodePort: &models.KubeProxyReplacementFeaturesNodePort{
					Enabled: st.kprMode == models.KubeProxyReplacementModeTrue, Mode: "SNAT", Algorithm: "Random",
					Acceleration: "None", PortMin: 30000, PortMax: 32767,
				},
				ExternalIPs: &models.KubeProxyReplacementFeaturesExternalIPs{Enabled: st.kprMode == models.KubeProxyReplacementModeTrue},
				HostPort:    &models.KubeProxyReplacementFeaturesHostPort{Enabled: st.kprMode == models.KubeProxyReplacementModeTrue},
				SocketLB:    &models.KubeProxyReplacementFeaturesSocketLB{Enabled: st.kprMode == models.KubeProxyReplacementModeTrue},
			},
		},
		Kubernetes: &models.K8sStatus{State: st.k8sState, Msg: st.k8sMsg, K8sAPIVersions: []string{"cilium/v2::CiliumNode", "core/v1::Pods", "discovery/v1::EndpointSlice"}},
	}
	if resp.Kubernetes.Msg == "" {
		resp.Kubernetes.Msg = st.k8sMinor
	}

	resp.Controllers = append(resp.Controllers, ctrl("sync-lb-maps-with-k8s-services", false), ctrl("endpoint-gc", false))
	for _, name := range st.failing {
		resp.Controllers = append(resp.Controllers, ctrl(name, true))
	}

	return resp
}

// serviceList is `cilium-dbg service list -o json`: Cilium's REST models,
// protocols upper-case as the agent writes them (the model's enum says
// lower-case; the agent does not validate its own replies).
func (st *agentState) serviceList() []*models.Service {
	out := make([]*models.Service, 0, len(st.frontends))

	for i, fe := range st.frontends {
		spec := &models.ServiceSpec{
			ID:              int64(i + 1),
			FrontendAddress: &models.FrontendAddress{IP: fe.ip, Port: fe.port, Protocol: fe.proto, Scope: models.FrontendAddressScopeExternal},
			Flags:           &models.ServiceSpecFlags{Type: models.ServiceSpecFlagsTypeClusterIP, Namespace: fe.svcNamespace, Name: fe.svcName, TrafficPolicy: "Cluster"},
		}
		for _, b := range fe.backends {
			ip, w := b.ip, uint16(100)
			spec.BackendAddresses = append(spec.BackendAddresses, &models.BackendAddress{
				IP: &ip, Port: b.port, Protocol: b.proto, NodeName: b.node, State: models.BackendAddressStateActive, Weight: &w,
			})
		}

		out = append(out, &models.Service{Spec: spec, Status: &models.ServiceStatus{Realized: spec}})
	}

	return out
}

// dbFrontend is one row of Cilium's frontends table as `db/show frontends
// -f json` writes it (pkg/loadbalancer.Frontend; no API model exists).
type dbFrontend struct {
	Address     string      `json:"Address"`
	Type        string      `json:"Type"`
	ServiceName string      `json:"ServiceName"`
	PortName    string      `json:"PortName"`
	ServicePort uint16      `json:"ServicePort"`
	Status      dbStatus    `json:"Status"`
	Backends    []dbBackend `json:"Backends"`
	ID          int         `json:"ID"`
	RedirectTo  *string     `json:"RedirectTo"`
}

type dbStatus struct {
	UpdatedAt time.Time `json:"updated-at"`
	Error     *string   `json:"error,omitempty"`
	ID        uint64    `json:"id,omitempty"`
	Kind      string    `json:"kind"`
}

type dbBackend struct {
	ServiceName string   `json:"ServiceName"`
	Address     string   `json:"Address"`
	PortNames   []string `json:"PortNames"`
	Weight      int      `json:"Weight"`
	NodeName    string   `json:"NodeName"`
	Zone        *string  `json:"Zone"`
	ClusterID   int      `json:"ClusterID"`
	Source      string   `json:"Source"`
	State       int      `json:"State"`
	Unhealthy   bool     `json:"Unhealthy"`
}

func l3n4(ip string, port uint16, proto string) string {
	return net.JoinHostPort(ip, strconv.Itoa(int(port))) + "/" + proto
}

func (fe simFrontend) row(id int) dbFrontend {
	r := dbFrontend{
		Address: l3n4(fe.ip, fe.port, fe.proto), Type: "ClusterIP", ServiceName: fe.svcNamespace + "/" + fe.svcName,
		PortName: fe.portName, ServicePort: fe.port, ID: id,
		Status: dbStatus{UpdatedAt: fe.since.UTC(), Kind: fe.status},
	}
	if fe.errMsg != "" {
		r.Status.Error = &fe.errMsg
	}

	for _, b := range fe.backends {
		var names []string
		if fe.portName != "" {
			names = []string{fe.portName}
		}

		r.Backends = append(r.Backends, dbBackend{
			ServiceName: r.ServiceName, Address: l3n4(b.ip, b.port, b.proto), PortNames: names,
			Weight: 100, NodeName: b.node, Source: "k8s",
		})
	}

	return r
}

// dbQuery is `cilium-dbg shell -- db/show frontends -f json` and
// `db/get frontends ADDRESS -f json`: one indented JSON object per row,
// nothing for no match.
func (st *agentState) dbQuery(args []string, out, errw io.Writer) int {
	var cmd, table, key, format string

	var rest []string

	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-f" || a == "--format":
			if i+1 < len(args) {
				format = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--format="):
			format = strings.TrimPrefix(a, "--format=")
		default:
			rest = append(rest, a)
		}
	}

	if len(rest) > 0 {
		cmd = rest[0]
	}

	if len(rest) > 1 {
		table = rest[1]
	}

	if len(rest) > 2 {
		key = rest[2]
	}

	if table != "frontends" || (cmd != "db/show" && cmd != "db/get") || (cmd == "db/get" && key == "") {
		fmt.Fprintf(errw, "the simulated agent's shell answers only db/show frontends and db/get frontends ADDRESS, not %q\n", strings.Join(args, " "))
		return 1
	}

	if format != "json" {
		fmt.Fprintln(errw, "the simulated agent's shell writes only -f json")
		return 1
	}

	for i, fe := range st.frontends {
		r := fe.row(i + 1)
		if cmd == "db/get" && r.Address != key {
			continue
		}

		if code := writeJSON(out, errw, r); code != 0 {
			return code
		}

		if cmd == "db/get" {
			break
		}
	}

	return 0
}
