package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/netcheck"
	"devata.dev/devata/render"
	"devata.dev/devata/storagecheck"
)

func TestCheckNames(t *testing.T) {
	without, with := checkNames(false), checkNames(true)
	for _, n := range []string{storagecheck.CheckDeclaration, storagecheck.CheckRawDisks} {
		if slices.Contains(without, n) || slices.Contains(with, n) {
			t.Errorf("%s is not a demo check", n)
		}
	}
	for _, n := range []string{machines.CheckKubelet, netcheck.CheckAgent} {
		if slices.Contains(without, n) || !slices.Contains(with, n) {
			t.Errorf("%s: want it with Kubernetes only; without %v, with %v", n, without, with)
		}
	}
	for _, n := range []string{machines.CheckConfig, machines.CheckEtcd, storagecheck.CheckVolumes} {
		if !slices.Contains(without, n) || !slices.Contains(with, n) {
			t.Errorf("%s: want it always; without %v, with %v", n, without, with)
		}
	}
}

func TestStepPrintsTitleThenOutcomeWithDuration(t *testing.T) {
	var out bytes.Buffer
	st := startStep(&out, "render: %d machines", 5)
	st.done("%d configs", 5)
	if !regexp.MustCompile(`^\n==> render: 5 machines\n    5 configs \([0-9.]+(ns|µs|ms|s)\)\n$`).MatchString(out.String()) {
		t.Errorf("step printed %q", out.String())
	}
}

// Without Kubernetes the story runs on the sim alone; devata's commands are
// recorded here instead of run, so the test sees what the demo asks of them.
func TestRunTellsTheStoryInOrder(t *testing.T) {
	var out bytes.Buffer
	var calls [][]string
	var applied []string // what each apply finds in the inventory: worker-1's hold and groups
	err := Run(context.Background(), Options{
		Out: &out, Err: io.Discard,
		Devata: func(_ context.Context, args []string) int {
			calls = append(calls, args)
			i := slices.Index(args, "--config")
			if i < 0 || i+1 == len(args) {
				t.Errorf("devata %v: no --config pinned", args)
			} else if _, err := os.Stat(args[i+1]); err != nil {
				t.Errorf("devata %v: settings file: %v", args, err)
			}
			if args[0] == "apply" {
				applied = append(applied, appliedInventory(t, args))
			}
			return 0
		},
		PrintRendered: func(w io.Writer, _ *inventory.Inventory, r []*render.Rendered) {
			io.WriteString(w, "RENDERED\n") //nolint:errcheck // a buffer
		},
		DescribeFleet: func(inv *inventory.Inventory) string { return "FLEET" },
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	var titles []string
	for line := range strings.Lines(out.String()) {
		if title, ok := strings.CutPrefix(line, "==> "); ok {
			titles = append(titles, strings.Fields(title)[0])
		}
	}
	want := []string{"inventory:", "secrets:", "render:", "fleet:", "bootstrap:", "drift", "faults:", "drift:", "apply:", "drift", "groups", "recovery:", "drift"}
	if !slices.Equal(titles, want) {
		t.Errorf("steps %q, want %q", titles, want)
	}
	for _, w := range []string{"valid: FLEET", "RENDERED\n", "$ devata bootstrap --yes --etcd-settle 2s --kubeconfig-out ", " --skip-nodes\n", "$ devata apply --yes\n", "$ devata backup etcd --to ", " --recover-from ", "lost their system disks", "Everything above ran against SIMULATED machines."} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	var verbs []string
	for _, c := range calls {
		verbs = append(verbs, c[0])
	}
	if want := []string{"bootstrap", "drift", "drift", "apply", "drift", "apply", "apply", "backup", "bootstrap", "drift"}; !slices.Equal(verbs, want) {
		t.Errorf("ran %q, want %q", verbs, want)
	}
	// the first apply before any group or hold; the second with worker-1
	// held and both workers in the longhorn group; the third with the hold lifted
	wantApplied := []string{
		"worker-1 held by \"\", groups []; worker-2 groups []",
		"worker-1 held by \"disk replacement, OPS-123\", groups [longhorn]; worker-2 groups [longhorn]",
		"worker-1 held by \"\", groups [longhorn]; worker-2 groups [longhorn]",
	}
	if !slices.Equal(applied, wantApplied) {
		t.Errorf("the applies found\n  %q\nwant\n  %q", applied, wantApplied)
	}
	if drift := calls[1]; slices.Contains(drift, "--checks=") || !strings.HasPrefix(drift[1], "--checks=config,") || strings.Contains(drift[1], machines.CheckKubelet) {
		t.Errorf("drift without Kubernetes: %v", drift)
	}
}

// appliedInventory loads the inventory a devata command is pointed at
// (-i) and says what it holds of the workers: worker-1's hold and each
// worker's groups.
func appliedInventory(t *testing.T, args []string) string {
	t.Helper()
	i := slices.Index(args, "-i")
	if i < 0 || i+1 == len(args) {
		t.Fatalf("devata %v: no -i pinned", args)
	}
	inv, err := inventory.Load(args[i+1])
	if err != nil {
		t.Fatalf("devata %v: %v", args, err)
	}
	w1, w2 := inv.Machine("worker-1"), inv.Machine("worker-2")
	reason := ""
	if h := w1.ActiveHold(); h != nil {
		reason = h.Reason
	}
	return fmt.Sprintf("worker-1 held by %q, groups %v; worker-2 groups %v", reason, w1.Groups, w2.Groups)
}
