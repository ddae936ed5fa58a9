package sim

import (
	"errors"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
)

// programs caches compiled disk selectors by their text: fleets share a few
// selectors, and compiling one costs far more than evaluating it.
var programs sync.Map // string → cel.Program

func diskProgram(expr string) (cel.Program, error) {
	if p, ok := programs.Load(expr); ok {
		return p.(cel.Program), nil //nolint:forcetypeassert // only programs are stored
	}

	env := celenv.DiskLocator()

	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}

	p, err := env.Program(ast)
	if err != nil {
		return nil, err
	}

	programs.Store(expr, p)

	return p, nil
}

// celMatch evaluates a disk selector against a disk's spec, as
// DiskContext.ToCELContext builds it: system_disk is only set once Talos
// knows its system disk.
func celMatch(expr string) func(*layout, bool) (bool, error) {
	prog, err := diskProgram(expr)

	return func(l *layout, systemDiskKnown bool) (bool, error) {
		switch {
		case err != nil:
			return false, err
		case l.spec == nil:
			return false, errors.New("disk " + l.id() + " has no spec")
		}

		vars := map[string]any{"disk": l.spec}
		if systemDiskKnown {
			vars["system_disk"] = l.system
		}

		out, _, err := prog.Eval(vars)
		if err != nil {
			return false, err
		}

		ok, _ := out.Value().(bool)

		return ok, nil
	}
}
