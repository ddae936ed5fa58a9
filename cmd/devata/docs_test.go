package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// docs/reconcile.md's usage block names every flag devata reconcile has,
// and no other (issue 17: docs true to what exists).
func TestReconcileDocsUsageNamesEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/reconcile.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```\n(devata reconcile .*?)```").FindStringSubmatch(string(doc))
	if block == nil {
		t.Fatal("docs/reconcile.md has no usage block starting with devata reconcile")
	}
	var documented []string
	for _, m := range regexp.MustCompile(`--([a-z][a-z-]*)`).FindAllStringSubmatch(block[1], -1) {
		if !slices.Contains(documented, m[1]) {
			documented = append(documented, m[1])
		}
	}
	slices.Sort(documented)
	root := (&app{}).newRootCommand()
	cmd, _, err := root.Find([]string{"reconcile"})
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			flags = append(flags, f.Name)
		}
	})
	slices.Sort(flags)
	if !slices.Equal(documented, flags) {
		t.Errorf("docs/reconcile.md's usage names %v\ndevata reconcile has %v", documented, flags)
	}
	if !strings.Contains(block[1], "--interval 5m") {
		t.Error("the usage block lost the default interval")
	}
}
