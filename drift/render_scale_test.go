package drift_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"devata.dev/devata/drift"
)

// An unreachable machine's checks say the same thing: the table says it
// once, naming the checks it blocked (issue 17: it printed the same reason
// and next step once per check); JSON keeps every result.
func TestTableFoldsResultsThatSayTheSame(t *testing.T) {
	rep := drift.NewReport(drift.Header{Cluster: "lab", Machines: []drift.Machine{{Name: "worker-2", Role: "worker", Address: "10.20.0.22:50000"}}})
	down := errors.New("dial 10.20.0.22:50000: connection refused")
	next := "check that worker-2 is up and its Talos API reachable: talosctl -n 10.20.0.22 version"
	names := []string{"config", "talos-version", "machine-stage", "kubelet", "storage-volumes", "storage-mounts", "cilium-declaration"}
	for i, name := range names {
		r := drift.Unknown(down, next).Of("worker-2", name, drift.RungReconciliation)
		r.FailClosed = i == 0
		rep.Add(r)
	}
	rep.Add(drift.Unknown(errors.New("no agent pod on node worker-2"), "kubectl -n kube-system get pods -o wide").Of("worker-2", "cilium-agent", drift.RungReconciliation))
	rep.Finish()
	var buf bytes.Buffer
	if err := drift.WriteTable(&buf, rep, drift.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	// folded by failure policy too: the fail-open checks are not filed
	// under the fail-closed one's "blocks a rollout" (issue 33)
	if n := strings.Count(out, down.Error()); n != 2 {
		t.Errorf("the unreachable reason is printed %d times, want twice (fail-open, fail-closed):\n%s", n, out)
	}
	if !strings.Contains(out, "  cilium-declaration, kubelet, machine-stage, storage-mounts, storage-volumes, talos-version (6 checks): Unknown, fail-open: reported, does not block a rollout\n    reason:   dial") {
		t.Errorf("the fail-open checks are not folded as one entry that does not block:\n%s", out)
	}
	if !strings.Contains(out, "  config (reconciliation): Unknown, fail-closed: blocks a rollout\n    reason:   dial") {
		t.Errorf("the fail-closed check is not on its own, blocking:\n%s", out)
	}
	if strings.Count(out, "blocks a rollout") != 1 {
		t.Errorf("want one entry blocking a rollout:\n%s", out)
	}
	if !strings.Contains(out, "  cilium-agent (reconciliation): Unknown, fail-open: reported, does not block a rollout\n    reason:   no agent pod on node worker-2") {
		t.Errorf("a result saying something else is folded in:\n%s", out)
	}
	var js bytes.Buffer
	if err := drift.WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(js.String(), `"check":`); n != len(names)+1 {
		t.Errorf("JSON holds %d results, want every one (%d)", n, len(names)+1)
	}
}

// Past drift.SummaryAbove machines the machine table lists the ones not in
// sync and counts the rest; --all lists them all (issue 17: a clean
// 1,000-machine drift printed a line per machine).
func TestTableIsSummaryFirstAtScale(t *testing.T) {
	n := drift.SummaryAbove + 10
	var ms []drift.Machine
	for i := range n {
		ms = append(ms, drift.Machine{Name: fmt.Sprintf("worker-%03d", i), Role: "worker"})
	}
	rep := drift.NewReport(drift.Header{Cluster: "big", Machines: ms})
	for i, m := range ms {
		if i == 7 {
			rep.Add(drift.Drifted("differs", "a", "b").Of(m.Name, "config", drift.RungReconciliation))
			continue
		}
		rep.Add(drift.InSync("same").Of(m.Name, "config", drift.RungReconciliation))
	}
	rep.Finish()
	rows := func(opts drift.TableOptions) (int, string) {
		var buf bytes.Buffer
		if err := drift.WriteTable(&buf, rep, opts); err != nil {
			t.Fatal(err)
		}
		return strings.Count(buf.String(), "  worker  "), buf.String()
	}
	if got, out := rows(drift.TableOptions{}); got != 1 || !strings.Contains(out, fmt.Sprintf("(%d more machines in sync; --all lists every machine)", n-1)) {
		t.Errorf("summary table has %d machine rows, want the 1 drifted and a count of the rest:\n%s", got, out)
	}
	if got, _ := rows(drift.TableOptions{All: true}); got != n {
		t.Errorf("--all lists %d machines, want %d", got, n)
	}
}
