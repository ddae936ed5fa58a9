package netcheck_test

import (
	"errors"
	"strings"
	"testing"

	"devata.dev/devata/netcheck"
)

func TestAgentCommand(t *testing.T) {
	cmd := netcheck.AgentCommand([]string{"10.96.0.1:443/TCP", "[fd00::1]:443/TCP"})
	if len(cmd) != 3 || cmd[0] != "sh" || cmd[1] != "-c" {
		t.Fatalf("not one sh -c: %q", cmd)
	}
	for _, want := range []string{
		"cilium-dbg status -o json",
		"cilium-dbg shell -- db/get frontends '10.96.0.1:443/TCP' -f json",
		"cilium-dbg shell -- db/get frontends '[fd00::1]:443/TCP' -f json",
		"cilium-dbg service list -o json",
	} {
		if !strings.Contains(cmd[2], want) {
			t.Errorf("script lacks %q:\n%s", want, cmd[2])
		}
	}
	if only := netcheck.AgentCommand(nil)[2]; strings.Contains(only, "frontends") || strings.Contains(only, "service list") {
		t.Errorf("status-only script asks for frontends:\n%s", only)
	}
}

const minimalStatus = `{"kube-proxy-replacement": {"mode": "True", "features": {"nodePort": {"enabled": true}}}, "kubernetes": {"state": "Ok"}}`

func TestParseAgentReply(t *testing.T) {
	fe := "10.96.0.1:443/TCP"
	row := `{"Address": "10.96.0.1:443/TCP", "ServiceName": "default/kubernetes", "Status": {"kind": "Done", "updated-at": "2026-12-02T10:00:00Z"}, "Backends": [{"Address": "192.0.2.2:6443/tcp"}]}`
	svcList := `[{"spec": {"frontend-address": {"ip": "10.96.0.1", "port": 443, "protocol": "TCP"}, "backend-addresses": [{"ip": "192.0.2.2", "port": 6443, "protocol": "TCP"}], "flags": {"namespace": "default", "name": "kubernetes"}}}]`
	tests := []struct {
		name, stdout, stderr string
		statusErr, feErr     string
		backends             string // of fe, "" when absent
		fromServiceList      bool
	}{
		{name: "all parts", stdout: minimalStatus + "\n#devata frontend " + fe + "\n" + row + "\n", backends: "192.0.2.2:6443/TCP"},
		{name: "no such frontend", stdout: minimalStatus + "\n#devata frontend " + fe + "\n"},
		{
			name:     "shell missing: service list",
			stdout:   minimalStatus + "\n#devata frontend " + fe + "\n#devata-exit 1\n#devata service-list\n" + svcList + "\n",
			stderr:   `Error: unknown command "shell" for "cilium-dbg"`,
			backends: "192.0.2.2:6443/TCP", fromServiceList: true,
		},
		{
			name:   "shell and service list fail",
			stdout: minimalStatus + "\n#devata frontend " + fe + "\n#devata-exit 1\n#devata service-list\n#devata-exit 1\n",
			stderr: "connection refused", feErr: "cilium-dbg shell -- db/get frontends exited 1: connection refused; and cilium-dbg service list exited 1",
			fromServiceList: true,
		},
		{name: "status fails", stdout: "#devata-exit 1\n", stderr: "Error: Unable to reach the agent's API: dial unix /var/run/cilium/cilium.sock", statusErr: "cilium-dbg status exited 1: Error: Unable to reach the agent's API"},
		{name: "frontend garbage", stdout: minimalStatus + "\n#devata frontend " + fe + "\nnot json\n", feErr: "cilium-dbg shell -- db/get frontends: invalid character"},
		{name: "status garbage", stdout: "Usage: cilium-dbg status\n", statusErr: "cilium-dbg status: want a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := netcheck.ParseAgentReply([]byte(tt.stdout), []byte(tt.stderr), []string{fe})
			checkErr(t, "status", o.StatusErr, tt.statusErr)
			checkErr(t, "frontends", o.FrontendsErr, tt.feErr)
			if tt.statusErr == "" && o.Status == nil {
				t.Error("no status")
			}
			if o.FromServiceList != tt.fromServiceList {
				t.Errorf("FromServiceList %t, want %t", o.FromServiceList, tt.fromServiceList)
			}
			got := ""
			if r, ok := o.Frontends[fe]; ok {
				got = strings.Join(r.BackendAddrs(), ",")
			}
			if got != tt.backends {
				t.Errorf("backends of %s: %q, want %q", fe, got, tt.backends)
			}
		})
	}
}

func checkErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: unexpected error %v", what, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("%s: error %v, want one containing %q", what, err, want)
	}
}

func TestExecErrorHidesTheCommand(t *testing.T) {
	err := netcheck.ExecErrorForTest("kube-system/cilium-x -c cilium-agent",
		errors.New(`Internal error occurred: error sending request: Post "https://127.0.0.1:52785/exec/kube-system/cilium-x/cilium-agent?command=sh&command=-c&command=cilium-dbg+status": dial tcp 127.0.0.1:52785: connect: connection refused`))
	want := `exec kube-system/cilium-x -c cilium-agent: Internal error occurred: error sending request: Post "https://127.0.0.1:52785/exec/kube-system/cilium-x/cilium-agent?…": dial tcp 127.0.0.1:52785: connect: connection refused`
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
}
