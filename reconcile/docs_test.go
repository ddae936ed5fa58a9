package reconcile_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/reconcile"
)

// jsonKeys are a JSON object's keys in the order written.
func jsonKeys(t *testing.T, line []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	return keys
}

// The audit log docs/reconcile.md shows is what a pass writes for the same
// change (issue 17: docs true to output): the same fields in the same
// order, and the same values but for time, identity and shard, which
// belong to the run.
func TestReconcileDocsShowTheAuditLog(t *testing.T) {
	doc, err := os.ReadFile("../docs/reconcile.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Audit log\n")
	m := regexp.MustCompile("(?s)```json\n(.*?)```").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("docs/reconcile.md has no ```json block under ## Audit log")
	}

	h := newLoop(t, nil)
	// the inventory in Git, committed, as an operator keeps it
	for _, args := range [][]string{
		{"-c", "init.defaultBranch=main", "init", "-q"}, {"add", "-A"},
		{"-c", "user.name=devata", "-c", "user.email=devata@example.com", "commit", "-q", "-m", "inventory"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", h.f.Dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v (the test needs git): %v\n%s", args, err, out)
		}
	}
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	h.opts.Audit = reconcile.NewAuditLog(h.audit, "devata-reconcile-7d9c-x2", reconcile.Shard{Index: 0, Count: 1})
	h.loop().Once(t.Context())
	real := map[string][]byte{} // result → the line written
	sc := bufio.NewScanner(strings.NewReader(h.audit.String()))
	for sc.Scan() {
		var r reconcile.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		real[r.Result] = slices.Clone(sc.Bytes())
	}
	n := 0
	for line := range strings.Lines(m[1]) {
		n++
		var want reconcile.AuditRecord
		if err := json.Unmarshal([]byte(line), &want); err != nil {
			t.Fatalf("docs line %q: %v", line, err)
		}
		got, ok := real[want.Result]
		if !ok {
			t.Errorf("the docs show a %q record; the pass wrote %s", want.Result, h.audit.String())
			continue
		}
		if dk, gk := jsonKeys(t, []byte(line)), jsonKeys(t, got); !slices.Equal(dk, gk) {
			t.Errorf("docs' %s record has fields %v, the pass writes %v", want.Result, dk, gk)
		}
		var rec reconcile.AuditRecord
		_ = json.Unmarshal(got, &rec)
		if len(rec.InventoryCommit) != 40 || len(rec.InventorySHA256) != 64 {
			t.Errorf("the pass's %s record names no commit or sha256: %+v", want.Result, rec)
		}
		// the run's own: when, and which commit and file
		want.Time, want.InventoryCommit, want.InventorySHA256 = rec.Time, rec.InventoryCommit, rec.InventorySHA256
		if !reflect.DeepEqual(want, rec) {
			t.Errorf("docs' %s record:\n%+v\nthe pass wrote:\n%+v", want.Result, want, rec)
		}
	}
	if n == 0 {
		t.Error("the docs' audit block is empty")
	}
}
