package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"devata.dev/devata/checks"
	"devata.dev/devata/drift"
)

// TestHelpListsEveryCheck: drift's help text and its --checks usage name
// every check of the registry, in its order, and none it does not have.
func TestHelpListsEveryCheck(t *testing.T) {
	r := devata(t, nil, "drift", "--help")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	help := strings.Join(strings.Fields(r.stdout), " ")
	long, _, ok := strings.Cut(help, "See docs/checks.md")
	if !ok {
		t.Fatalf("help has no check list:\n%s", r.stdout)
	}
	_, long, _ = strings.Cut(long, "Checks: ")
	long = strings.TrimSuffix(strings.TrimSpace(long), ".")
	_, usage, ok := strings.Cut(help, "--checks strings only these checks (comma-separated): ")
	if !ok {
		t.Fatalf("help has no --checks usage:\n%s", r.stdout)
	}
	// the next flag: "-h, --help …" or "--html-file string …", not the
	// "(with --probe)" of a transaction check
	if loc := regexp.MustCompile(` (-[a-zA-Z], )?--[a-z][a-z-]* `).FindStringIndex(usage); loc != nil {
		usage = usage[:loc[0]]
	}
	name := regexp.MustCompile(`[a-z][a-z0-9]*(-[a-z0-9]+)*`)
	for what, text := range map[string]string{"drift's help": long, "--checks usage": usage} {
		var got []string
		for _, item := range strings.Split(text, ", ") {
			got = append(got, name.FindString(item))
		}
		if want := checks.Names(); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s lists %v, the registry %v", what, got, want)
		}
	}
}

// TestThrowawayCheckReachesHelpAndChecksFlag: a check added to the registry
// alone (a copy: nothing leaks to other tests) is in drift's help text and
// its --checks usage, and --checks takes it, before anything is loaded.
func TestThrowawayCheckReachesHelpAndChecksFlag(t *testing.T) {
	reg := checks.All().With(checks.Entry{Info: drift.Info{Name: "throwaway-check", Rung: drift.RungResources}, Family: checks.FamilyMachine})
	run := func(args ...string) result {
		t.Setenv("XDG_CONFIG_HOME", t.TempDir())
		var out, errb bytes.Buffer
		code := runWith(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(string) string { return "" }, reg)
		return result{code, out.String(), errb.String()}
	}
	help := run("drift", "--help")
	if help.code != 0 {
		t.Fatalf("exit %d\n%s", help.code, help.err)
	}
	text := strings.Join(strings.Fields(help.stdout), " ")
	lacks(t, "drift's help", text, "cilium-probe (with --probe), throwaway-check. See docs/checks.md", "(comma-separated): config, talos-version,", "cilium-probe (with --probe), throwaway-check -h, --help")
	if strings.Count(text, "throwaway-check") != 2 {
		t.Errorf("drift's help names throwaway-check %d times, want 2 (the list and --checks):\n%s", strings.Count(text, "throwaway-check"), help.stdout)
	}
	// --checks takes it: the first name refused is the one after it
	r := run("drift", "-i", "does-not-matter.yaml", "--checks", "throwaway-check,nope")
	if r.code != exitUsage || !strings.Contains(r.err, `no check "nope"`) || !strings.Contains(r.err, "cilium-probe, throwaway-check)") {
		t.Errorf("--checks throwaway-check,nope: exit %d\n%s", r.code, r.err)
	}
	// the registry everyone else reads does not have it
	if got := devata(t, nil, "drift", "--checks", "throwaway-check"); got.code != exitUsage || !strings.Contains(got.err, `no check "throwaway-check"`) {
		t.Errorf("checks.All() has the throwaway check: exit %d\n%s", got.code, got.err)
	}
}
