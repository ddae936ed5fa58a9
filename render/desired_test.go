package render_test

import (
	"bytes"
	"testing"

	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

// A lean Desired holds nothing and gives the held one's bytes again; a
// selection holds just the named machines.
func TestRenderDesiredLeanOrHeld(t *testing.T) {
	inv, b := loadFixture(t)
	held, err := render.DesiredOf(t.Context(), inv, b, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if held.Lean() || len(held.Held()) != len(inv.Machines) {
		t.Fatalf("held: lean %t, %d configs, want %d", held.Lean(), len(held.Held()), len(inv.Machines))
	}
	before := render.LeanAbove
	render.LeanAbove = len(inv.Machines) - 1
	defer func() { render.LeanAbove = before }()
	lean, err := render.DesiredOf(t.Context(), inv, b, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if !lean.Lean() || lean.Held() != nil {
		t.Fatalf("past LeanAbove: lean %t, %d configs held", lean.Lean(), len(lean.Held()))
	}
	for i := range inv.Machines {
		m := &inv.Machines[i]
		got, err := lean.Config(m)
		if err != nil || !bytes.Equal(got, held.Held()[m.Name]) {
			t.Errorf("%s: lean config differs from the held one (%v)", m.Name, err)
		}
		only, err := lean.Only(m)
		if err != nil || len(only) != 1 || !bytes.Equal(only[m.Name], got) {
			t.Errorf("%s: Only gives %d configs (%v)", m.Name, len(only), err)
		}
	}
	if notLean, err := render.DesiredOf(t.Context(), inv, b, nil, false); err != nil || notLean.Lean() {
		t.Errorf("without leanOK a Desired past LeanAbove is lean %t (%v)", notLean.Lean(), err)
	}

	some, err := render.DesiredOf(t.Context(), inv, b, []string{"worker-2", "cp-1", "no-such-machine"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if some.Lean() || len(some.Held()) != 2 {
		t.Fatalf("a selection of two: lean %t, %d held", some.Lean(), len(some.Held()))
	}
	for name, c := range some.Held() {
		if !bytes.Equal(c, held.Held()[name]) {
			t.Errorf("%s: the selection renders other bytes", name)
		}
	}
	if _, err := some.Config(&inventory.Machine{Name: "cp-2"}); err == nil {
		t.Error("a held Desired gave a config for a machine it does not hold")
	}
}
