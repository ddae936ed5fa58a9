package inventory

import (
	"fmt"
	"os"
	"path/filepath"

	"devata.dev/devata/redact"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
)

// patches checks that every patch file exists and loads with machinery's configpatcher.
func (v *validator) patches(path string, files []string) {
	for i, f := range files {
		pp := fmt.Sprintf("%s[%d]", path, i)
		if f == "" {
			v.errorf(pp, "empty patch path")
			continue
		}
		msg, seen := v.patchProblems[f]
		if !seen {
			msg = v.patchProblem(f)
			if v.patchProblems == nil {
				v.patchProblems = map[string]string{}
			}
			v.patchProblems[f] = msg
		}
		if msg != "" {
			v.errorf(pp, "%s", msg)
		}
	}
}

// patchProblem reads and loads one patch file; "" when it is fine. The
// message never quotes the file.
func (v *validator) patchProblem(f string) string {
	path, err := Confine(v.dir, v.inv.Cluster.ReadableDirs, f)
	if err != nil {
		return err.Error()
	}
	data, err := ReadFile(path)
	if err != nil {
		return fmt.Sprintf("cannot read patch %s: %v", f, unwrapPathError(err))
	}
	if _, err := configpatcher.LoadPatch(data); err != nil {
		return fmt.Sprintf("patch %s does not load as a Talos config patch: %s", f, redact.DecodeError(err))
	}
	if errs := CheckPatchKinds(f, data, v.inv.Cluster.TalosVersion); len(errs) > 0 {
		return "patch " + NewerKinds(errs)
	}
	return ""
}

// ResolvePath makes a path from the inventory relative to the inventory's directory.
func ResolvePath(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
