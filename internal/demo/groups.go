package demo

import (
	"context"
	"fmt"
	"os"
	"strings"

	"devata.dev/devata/inventory"
	"devata.dev/devata/sim"
)

// The inventory edits of the groups step: a group the workers' own
// storage label selects, giving them one more node label, and a hold on
// worker-1 while its disk is replaced.
const (
	longhornGroup = `groups:
  - name: longhorn
    selector:
      matchLabels: {storage.devata.dev/longhorn: "true"}
    labels: {storage.devata.dev/pool: longhorn}
`
	holdReason = "disk replacement, OPS-123"
	heldEntry  = "  - name: worker-1\n"
	holdLine   = `    hold: {reason: "` + holdReason + `"}` + "\n"
)

// groups shows a machine group and a hold: the operator groups the
// Longhorn workers by their label and holds worker-1; apply changes the
// group's other machine and reports worker-1 held, not changed; with the
// hold lifted, the next apply changes it too.
func (s *scenario) groups(ctx context.Context) error {
	startStep(s.Out, "groups and holds: the Longhorn workers as a group (by label), worker-1 held; apply leaves it alone")
	// Meanwhile worker-2 came back.
	s.sim.Machine("worker-2").SetFaults(sim.Faults{})
	if err := s.editInventory(func(inv string) (string, error) {
		if !strings.Contains(inv, heldEntry) {
			return "", fmt.Errorf("the embedded example has no worker-1 (a devata bug)")
		}
		return strings.Replace(inv, heldEntry, heldEntry+holdLine, 1) + longhornGroup, nil
	}); err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "\n$ $EDITOR inventory.yaml   # worker-1 held; a group for the machines labelled storage.devata.dev/longhorn=true\n%s  ...\n%s", heldEntry+holdLine, longhornGroup)
	if code := s.devata(ctx, "apply", "--yes"); code != 0 {
		return fmt.Errorf("apply with worker-1 held exited %d", code)
	}
	fmt.Fprintln(s.Out, "    exit 0 (a held machine does not fail apply)")
	s.syncKubelets(ctx)

	if err := s.editInventory(func(inv string) (string, error) {
		return strings.Replace(inv, holdLine, "", 1), nil
	}); err != nil {
		return err
	}
	fmt.Fprintln(s.Out, "\n$ $EDITOR inventory.yaml   # the disk is replaced: worker-1's hold lifted")
	if code := s.devata(ctx, "apply", "--yes"); code != 0 {
		return fmt.Errorf("apply after the hold exited %d", code)
	}
	fmt.Fprintln(s.Out, "    exit 0")
	s.syncKubelets(ctx)
	return nil
}

// editInventory rewrites the demo's inventory file with edit and checks
// that the result still loads, as devata's commands will load it.
func (s *scenario) editInventory(edit func(string) (string, error)) error {
	data, err := os.ReadFile(s.invPath)
	if err != nil {
		return err
	}
	edited, err := edit(string(data))
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.invPath, []byte(edited), 0o644); err != nil {
		return err
	}
	if s.inv, err = inventory.Load(s.invPath); err != nil {
		return fmt.Errorf("the demo's inventory edit is invalid (a devata bug): %w", err)
	}
	return nil
}
