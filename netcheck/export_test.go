package netcheck

// ExecErrorForTest is a failed exec as PodsExec reports it.
func ExecErrorForTest(ref string, err error) error { return &execError{ref: ref, err: err} }
