package inventory

import (
	"cmp"
	"context"
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
	return LoadContext(context.Background(), path)
}

// LoadContext is Load that stops when ctx is done (Ctrl-C on a very large
// inventory): decoding and validation look at ctx every few nodes and every
// machine, and return an *InterruptedError instead of the findings so far.
func LoadContext(ctx context.Context, path string) (*Inventory, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w (point -i or DEVATA_INVENTORY at your inventory, or start from examples/homelab/inventory.yaml)", err)
	}
	return ParseContext(ctx, data, path)
}

// Parse decodes, defaults and validates an inventory held in data; path names
// it in errors and anchors relative patch paths.
func Parse(data []byte, path string) (*Inventory, error) {
	return ParseContext(context.Background(), data, path)
}

// ParseContext is Parse that stops when ctx is done, as LoadContext does.
func ParseContext(ctx context.Context, data []byte, path string) (*Inventory, error) {
	inv := &Inventory{}
	d := newDecoder(path)
	d.ctx = ctx
	d.decodeDocument(data, inv)
	inv.Path = path
	if d.interrupted {
		return nil, &InterruptedError{Doing: "decoding " + path, Cause: context.Cause(ctx)}
	}
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
	v := &validator{ctx: ctx, inv: inv, dir: filepath.Dir(path), d: d}
	v.validate()
	if v.interrupted != nil {
		return nil, v.interrupted
	}
	inv.Warnings = v.warns
	if all := append(d.errs, v.errs...); len(all) > 0 {
		return nil, errorList(all)
	}
	return inv, nil
}

// InterruptedError is a pass over the inventory's machines (decoding,
// validating, rendering) that stopped because its context was done: Ctrl-C,
// SIGTERM or a deadline. Whatever it found so far is dropped, since it is
// not the whole answer.
type InterruptedError struct {
	Doing       string // what stopped, e.g. "validating inventory.yaml"
	Done, Total int    // machines finished of those it had; Total 0 when not counted
	Cause       error  // context.Cause of the context: which signal, or the deadline
}

func (e *InterruptedError) Error() string {
	if e.Total > 0 {
		return fmt.Sprintf("interrupted: %s stopped after %d of %d machines: %v", e.Doing, e.Done, e.Total, e.Cause)
	}
	return fmt.Sprintf("interrupted: %s stopped: %v", e.Doing, e.Cause)
}

func (e *InterruptedError) Unwrap() error { return e.Cause }

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
