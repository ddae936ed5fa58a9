package netcheck

import "devata.dev/devata/checks/target"

// ExecErrorForTest is a failed exec as PodsExec reports it.
func ExecErrorForTest(ref string, err error) error { return &execError{ref: ref, err: err} }

// View is what the cilium checks read of one node, for tests that make one.
type View = view

// TargetOf is the target whose cilium view v is, as if the pass had read it.
func TargetOf(v *View) *target.Target {
	t := &target.Target{Machine: v.Machine}
	target.Set(t, viewKey{}, v)
	return t
}
