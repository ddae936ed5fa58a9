package drift

import (
	"fmt"
	"strings"
	"time"
)

// Status is the outcome of one check on one machine.
type Status string

const (
	// StatusInSync means the check observed the machine and it matches the inventory.
	StatusInSync Status = "InSync"
	// StatusDrifted means the check observed the machine and it differs.
	StatusDrifted Status = "Drifted"
	// StatusUnknown means the check could not observe the machine (unreachable,
	// permission denied, timeout, …). It is never reported as InSync or Drifted.
	StatusUnknown Status = "Unknown"
)

// Valid reports whether s is one of the three statuses.
func (s Status) Valid() bool { return s == StatusInSync || s == StatusDrifted || s == StatusUnknown }

// severity orders statuses from best to worst; anything invalid counts as Unknown.
func (s Status) severity() int {
	switch s {
	case StatusInSync:
		return 0
	case StatusDrifted:
		return 1
	default:
		return 2
	}
}

// Worse returns the worse of two statuses: Unknown > Drifted > InSync; an
// invalid status counts as Unknown.
func Worse(a, b Status) Status {
	if b.severity() > a.severity() {
		return b
	}
	return a
}

// Worst is the worst status of results, InSync for none.
func Worst(results []Result) Status {
	w := StatusInSync
	for _, r := range results {
		w = Worse(w, r.Status)
	}
	return w
}

// Rung is a step of the evidence ladder (DESIGN.md, "Evidence ladder and checks"):
// each rung is stronger evidence that the machine really is what the inventory says.
type Rung string

const (
	RungDeclaration    Rung = "declaration"    // the inventory and rendered config say the right thing
	RungReconciliation Rung = "reconciliation" // the machine accepted it (active config, versions, agent status)
	RungResources      Rung = "resources"      // the resources it implies exist and are healthy
	RungInfrastructure Rung = "infrastructure" // the data path really works that way (services, volumes)
	RungTransaction    Rung = "transaction"    // an end-to-end transaction went through
)

// Rungs lists the rungs bottom to top, the order reports use.
func Rungs() []Rung {
	return []Rung{RungDeclaration, RungReconciliation, RungResources, RungInfrastructure, RungTransaction}
}

// order is the rung's position on the ladder; unknown rungs sort after all known ones.
func (r Rung) order() int {
	switch r {
	case RungDeclaration:
		return 0
	case RungReconciliation:
		return 1
	case RungResources:
		return 2
	case RungInfrastructure:
		return 3
	case RungTransaction:
		return 4
	default:
		return 5
	}
}

// Result is the outcome of one check on one machine. Desired, Actual, Diff
// and Changes must already be redacted by the check that made them: drift never sees secret
// values and cannot tell them apart from others.
type Result struct {
	Machine string `json:"machine"`
	Check   string `json:"check"`
	Rung    Rung   `json:"rung"`
	Status  Status `json:"status"`
	// Reason is one line saying why the result has its status.
	Reason string `json:"reason,omitempty"`
	// Desired and Actual are short, redacted values, e.g. "v1.11.0".
	Desired string `json:"desired,omitempty"`
	Actual  string `json:"actual,omitempty"`
	// Diff is a redacted unified diff; it may span lines.
	Diff string `json:"diff,omitempty"`
	// Changes says what Diff says by YAML path, one change a line
	// ("machine.network.hostname: "a" → "b""), cut to a few and a count.
	Changes []string `json:"changes,omitempty"`
	// Evidence lists what was read, e.g. "MachineConfig v1alpha1 version 7".
	Evidence []string `json:"evidence,omitempty"`
	// Next is the next command to run or thing to inspect.
	Next string `json:"next,omitempty"`
	// FailClosed is the check's failure policy: an Unknown blocks a rollout.
	FailClosed bool `json:"failClosed"`
	// Certificate is the credential a certificates result is about, with
	// its expiry: the textfile's devata_certificate_days_left.
	Certificate *Certificate `json:"certificate,omitempty"`
}

// Certificate is one credential's certificate as a check read it: which
// credential and when it stops working. Never the certificate itself.
type Certificate struct {
	// Credential names it: talosconfig, kubeconfig, kube-apiserver, apid.
	Credential string `json:"credential"`
	// Subject is the certificate's subject (its common name and
	// organizations: Talos roles, Kubernetes groups).
	Subject   string    `json:"subject"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
}

// WithCertificate returns r about the credential c.
func (r Result) WithCertificate(c Certificate) Result { r.Certificate = &c; return r }

// InSync is a check's result saying the machine matches, with what was
// read to know it. Evaluate fills in the machine, check and rung; a result
// made outside a check takes them from Of.
func InSync(evidence ...string) Result {
	return Result{Status: StatusInSync, Evidence: evidence}
}

// Drifted is a check's result saying the machine differs; desired and
// actual must be redacted. Add a diff, evidence and the next step with the
// With methods.
func Drifted(reason, desired, actual string) Result {
	return Result{Status: StatusDrifted, Reason: oneLine(reason), Desired: desired, Actual: actual}
}

// Unknown is a check's result saying it could not observe the machine; the
// reason is the error's text on one line and next says what to look at.
func Unknown(err error, next string) Result {
	reason := "could not observe (no error given)"
	if err != nil {
		reason = oneLine(err.Error())
	}
	return Result{Status: StatusUnknown, Reason: reason, Next: next}
}

// Of returns r as the result of check on machine, at rung: for results
// made outside Evaluate (reports of work that never reached a check).
func (r Result) Of(machine, check string, rung Rung) Result {
	r.Machine, r.Check, r.Rung = machine, check, rung
	return r
}

// WithDiff returns r with a redacted unified diff.
func (r Result) WithDiff(diff string) Result { r.Diff = diff; return r }

// WithChanges returns r with the redacted changes of its diff by path.
func (r Result) WithChanges(changes ...string) Result {
	r.Changes = append(r.Changes[:len(r.Changes):len(r.Changes)], changes...)
	return r
}

// WithEvidence returns r with evidence appended.
func (r Result) WithEvidence(evidence ...string) Result {
	r.Evidence = append(r.Evidence[:len(r.Evidence):len(r.Evidence)], evidence...)
	return r
}

// WithNext returns r with the next command or thing to inspect.
func (r Result) WithNext(next string) Result { r.Next = next; return r }

// WithReason returns r with a reason, kept to one line.
func (r Result) WithReason(reason string) Result { r.Reason = oneLine(reason); return r }

// Blocks reports whether r blocks a rollout: an Unknown of a fail-closed check.
func (r Result) Blocks() bool { return r.Status == StatusUnknown && r.FailClosed }

// normalize makes a result safe to count: a status outside the three becomes
// Unknown, since nothing may pass as InSync or Drifted without having been seen
// as such, and the reason is kept to one line.
func normalize(r Result) Result {
	if !r.Status.Valid() {
		reason := fmt.Sprintf("check reported invalid status %q", r.Status)
		if r.Reason != "" {
			reason += ": " + r.Reason
		}
		r.Status, r.Reason = StatusUnknown, reason
	}
	r.Reason = oneLine(r.Reason)
	return r
}

// oneLine folds multi-line text, such as a go-multierror or errors.Join message,
// into one line: "2 errors occurred: a; b".
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return strings.TrimSpace(s)
	}
	var b strings.Builder
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		line = strings.TrimSpace(strings.TrimPrefix(line, "* "))
		if line == "" {
			continue
		}
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(line)
	}
	return b.String()
}
