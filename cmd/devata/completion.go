package main

import (
	"strings"

	"github.com/spf13/cobra"

	"devata.dev/devata/config"
	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// registerCompletions gives the flags whose values devata knows their shell
// completions (devata completion bash|zsh|fish|powershell, cobra's default
// command, asks for them through cobra's hidden __complete): check names,
// machine names and addresses from the inventory the command would load,
// report formats, apply modes. Flags are found by name on every command, so
// a command that gains --machines completes it with no change here.
func (a *app) registerCompletions(root *cobra.Command) {
	outputs := map[string][]string{ // commands whose -o is a format, not a path
		"drift":   formatNames(),
		"plan":    plan.Formats(),
		"apply":   {"text", "json"},
		"upgrade": {"text", "json"},
	}
	modes := make([]string, 0, len(talosapi.Modes))
	for _, m := range talosapi.Modes {
		modes = append(modes, string(m))
	}
	register := func(c *cobra.Command, flag string, complete cobra.CompletionFunc) {
		if c.Flags().Lookup(flag) != nil {
			// it fails only for a flag that does not exist or already has one
			_ = c.RegisterFlagCompletionFunc(flag, complete)
		}
	}
	_ = root.RegisterFlagCompletionFunc("log-format", fixed(config.LogFormats))
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		register(c, "checks", completeList(a.checkChoices))
		register(c, "machines", completeList(a.machineChoices))
		register(c, "nodes", completeList(a.machineChoices))
		register(c, "mode", fixed(modes))
		if formats, ok := outputs[c.Name()]; ok {
			register(c, "output", fixed(formats))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func formatNames() []string {
	var out []string
	for _, f := range drift.Formats() {
		out = append(out, string(f))
	}
	return out
}

// fixed completes a flag that takes one value of a fixed list.
func fixed(values []string) cobra.CompletionFunc {
	return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
}

// choice is one value a list flag can take, with a description, and every
// value that means the same (a machine's name and its address).
type choice struct {
	value, desc string
	same        []string
}

// completeList completes the last element of a comma-separated list flag
// (--checks config,kub…): the elements already typed stay as a prefix and
// are not offered again, under any of their names.
func completeList(choices func(*cobra.Command) []choice) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		prefix, typed := "", map[string]bool{}
		if i := strings.LastIndex(toComplete, ","); i >= 0 {
			prefix = toComplete[:i+1]
			for _, v := range strings.Split(toComplete[:i], ",") {
				typed[v] = true
			}
		}
		var out []cobra.Completion
	next:
		for _, c := range choices(cmd) {
			for _, v := range append([]string{c.value}, c.same...) {
				if typed[v] {
					continue next
				}
			}
			if strings.HasPrefix(prefix+c.value, toComplete) {
				out = append(out, cobra.CompletionWithDesc(prefix+c.value, c.desc))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// checkChoices are the registry's check names, each described by its rung
// and the flag an optional one needs.
func (a *app) checkChoices(*cobra.Command) []choice {
	var out []choice
	for _, e := range a.registry() {
		desc := string(e.Rung)
		if e.Optional != "" {
			desc += ", with " + e.Optional
		}
		out = append(out, choice{value: e.Name, desc: desc})
	}
	return out
}

// machineChoices are the names, then the addresses, of the machines of the
// inventory the command would load (-i, DEVATA_INVENTORY, the settings
// file). None when the settings or the inventory do not load: a completion
// has nowhere to report an error.
func (a *app) machineChoices(cmd *cobra.Command) []choice {
	s, err := config.Load(cmd.Flags(), a.getenv)
	if err != nil {
		return nil
	}
	inv, err := inventory.Load(s.Inventory)
	if err != nil {
		return nil
	}
	var names, addresses []choice
	for i := range inv.Machines {
		m := &inv.Machines[i]
		names = append(names, choice{value: m.Name, desc: m.Role + " " + m.Address, same: []string{m.Address, m.Endpoint()}})
		addresses = append(addresses, choice{value: m.Address, desc: m.Name, same: []string{m.Name, m.Endpoint()}})
	}
	return append(names, addresses...)
}
