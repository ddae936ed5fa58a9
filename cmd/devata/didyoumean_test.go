package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A machine or check name typed nearly right gets "did you mean" with the
// name meant, from the inventory's own distance (inventory.Nearest), on
// every command that takes --machines or --checks; a name near nothing
// gets none (issue 33: --machines cp1 said only "no machine named").
func TestMachineAndCheckNamesSayDidYouMean(t *testing.T) {
	inv := homelab(t)
	if r := devata(t, nil, "gen", "secrets", "-i", inv); r.code != 0 {
		t.Fatalf("gen secrets: exit %d\n%s", r.code, r.err)
	}
	dir := t.TempDir()
	if r := devata(t, nil, "gen", "config", "-i", inv, "-o", dir); r.code != 0 {
		t.Fatalf("gen config: exit %d\n%s", r.code, r.err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"drift", "--machines", "cp1"}, `no machine named "cp1", or with that address, in ` + inv + `; did you mean "cp-1"?`},
		{[]string{"apply", "--dry-run", "-n", "Worker-2"}, `did you mean "worker-2"?`},
		{[]string{"upgrade", "--dry-run", "--machines", "cp-1,cp-4"}, `no machine named "cp-4"`},
		{[]string{"drift", "--checks", "kubelt"}, `--checks: no check "kubelt"; did you mean "kubelet"? (have config,`},
		{[]string{"drift", "--checks", "config,storage-volume"}, `did you mean "storage-volumes"?`},
	} {
		r := devata(t, nil, append(tc.args, "-i", inv, "--talosconfig", filepath.Join(dir, "talosconfig"))...)
		if r.code == 0 || !strings.Contains(r.err, tc.want) {
			t.Errorf("devata %s: exit %d, want an error with %q:\n%s", strings.Join(tc.args, " "), r.code, tc.want, r.err)
		}
	}
	for _, args := range [][]string{{"drift", "--machines", "storage"}, {"drift", "--checks", "zzz"}} {
		if r := devata(t, nil, append(args, "-i", inv)...); r.code == 0 || strings.Contains(r.err, "did you mean") {
			t.Errorf("devata %s: exit %d, want no suggestion:\n%s", strings.Join(args, " "), r.code, r.err)
		}
	}
}
