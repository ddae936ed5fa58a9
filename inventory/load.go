package inventory

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/go-multierror"
)

// Load reads, strictly decodes, defaults and validates the inventory at path.
// On failure the error is a *multierror.Error whose Errors are *FieldError,
// every problem of the file at once, sorted by position.
func Load(path string) (*Inventory, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w (point -i or DEVATA_INVENTORY at your inventory, or start from examples/homelab/inventory.yaml)", err)
	}
	return Parse(data, path)
}

// Parse decodes, defaults and validates an inventory held in data; path names
// it in errors and anchors relative patch paths.
func Parse(data []byte, path string) (*Inventory, error) {
	inv := &Inventory{}
	d := newDecoder(path)
	d.decodeDocument(data, inv)
	inv.Path = path
	if d.aliasRefused {
		// what was decoded is a fragment of the expansion: the one error that matters
		return nil, errorList(d.errs[len(d.errs)-1:])
	}
	if len(d.errs) > 0 && inv.APIVersion == "" && inv.Kind == "" && len(inv.Machines) == 0 {
		// Nothing decoded (syntax error or not a mapping): validating would only add noise.
		return nil, errorList(d.errs)
	}
	Default(inv)
	inv.index()
	v := &validator{inv: inv, dir: filepath.Dir(path), d: d}
	v.validate()
	inv.Warnings = v.warns
	if all := append(d.errs, v.errs...); len(all) > 0 {
		return nil, errorList(all)
	}
	return inv, nil
}

func errorList(errs []*FieldError) error {
	slices.SortStableFunc(errs, func(a, b *FieldError) int {
		return cmp.Or(cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Column, b.Pos.Column))
	})
	me := &multierror.Error{ErrorFormat: formatErrors}
	for _, e := range errs {
		me = multierror.Append(me, e)
	}
	return me
}

// MaxErrors is how many problems an error lists; the rest are counted.
const MaxErrors = 50

func formatErrors(errs []error) string {
	shown := errs[:min(len(errs), MaxErrors)]
	lines := make([]string, len(shown), len(shown)+1)
	for i, e := range shown {
		lines[i] = e.Error()
	}
	if more := len(errs) - len(shown); more > 0 {
		lines = append(lines, fmt.Sprintf("… and %d more problems (fix these first)", more))
	}
	return strings.Join(lines, "\n")
}

// FieldErrors returns the located errors inside an error returned by Load or Parse.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	if me, ok := err.(*multierror.Error); ok {
		for _, e := range me.Errors {
			if fe, ok := e.(*FieldError); ok {
				out = append(out, fe)
			}
		}
	}
	return out
}
