package drift_test

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"devata.dev/devata/drift"
)

// A read the Talos API denied, however wrapped, advises the role; any other
// failure keeps the family's own next step.
func TestReadFailedAdvisesTheRoleOnlyWhenDenied(t *testing.T) {
	denied := fmt.Errorf("read MachineConfig: %w", errors.Join(errors.New("other"), status.Error(codes.PermissionDenied, "not authorized")))
	r := drift.ReadFailed(denied, "talosctl get mc", "MachineConfig needs os:admin", "an os:admin talosconfig")
	if r.Status != drift.StatusUnknown || r.Next != "the talosconfig's certificate lacks the role this read needs (MachineConfig needs os:admin): use an os:admin talosconfig" {
		t.Errorf("denied: %s %q", r.Status, r.Next)
	}
	r = drift.ReadFailed(status.Error(codes.Unavailable, "down"), "talosctl get mc", "x", "y")
	if r.Status != drift.StatusUnknown || r.Next != "talosctl get mc" {
		t.Errorf("unavailable: %s %q", r.Status, r.Next)
	}
	if drift.Denied(errors.New("permission denied")) {
		t.Error("a plain error whose text says denied is not the API's PermissionDenied")
	}
}

func TestUnreachableNamesTheMachineAndTheCommand(t *testing.T) {
	r := drift.Unreachable("cp-1", errors.New("dial 10.0.0.1:50000: refused"), "talosctl -n 10.0.0.1 version")
	if r.Status != drift.StatusUnknown || r.Reason != "dial 10.0.0.1:50000: refused" || r.Next != "check that cp-1 is up and its Talos API reachable: talosctl -n 10.0.0.1 version" {
		t.Errorf("%+v", r)
	}
}

// FirstNext names the first problem's next step only; Result names each.
func TestFindingsFirstNext(t *testing.T) {
	var f drift.Findings
	f.Problem("a is missing", "")
	f.Problem("b is small", "grow b")
	f.Problem("c is wrong", "fix c")
	if f.Problems() != "a is missing; b is small; c is wrong" || f.FirstNext() != "grow b" {
		t.Errorf("%q %q", f.Problems(), f.FirstNext())
	}
	if r := f.Result("", ""); r.Next != "grow b; fix c" {
		t.Errorf("Result next %q", r.Next)
	}
}
