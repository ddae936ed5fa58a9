package main

import (
	"regexp"
	"strings"
	"testing"

	"devata.dev/devata/checks"
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
	usage, _, _ = strings.Cut(usage, " -") // the next flag
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
