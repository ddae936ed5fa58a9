package main

import (
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The global flags, by what they are for: every command reads the first
// group; the others only commands that load the secrets bundle, talk to
// the machines or to Kubernetes.
var (
	logFlags     = []string{"config", "verbose", "log-format"}
	bundleFlags  = []string{"inventory", "age-identity", "allow-shared-age-identity"}
	talosFlags   = []string{"talosconfig", "context", "endpoints", "timeout", "concurrency"}
	kubeFlags    = []string{"kubeconfig"}
	clusterFlags = slices.Concat(bundleFlags, talosFlags, kubeFlags)
)

// globalFlagsUsed are the global flags each command reads, by command path
// without "devata": its help lists those and hides the other inherited
// ones, which it would ignore (issue 33: plan --help offered flags plan
// never read). They stay accepted (a script that passes --kubeconfig to
// every command keeps working); only the help is true to the command.
// TestEveryCommandDeclaresTheGlobalFlagsItUses holds every command to an
// entry here.
var globalFlagsUsed = map[string][]string{
	"version":         nil,
	"completion":      nil,
	"demo":            nil,
	"validate":        bundleFlags,
	"gen":             bundleFlags,
	"gen secrets":     {"inventory"},
	"gen config":      bundleFlags,
	"gen talosconfig": bundleFlags,
	"sim":             bundleFlags,
	"plan":            clusterFlags,
	"drift":           clusterFlags,
	"apply":           clusterFlags,
	"upgrade":         clusterFlags,
	"reconcile":       clusterFlags,
	"bootstrap":       clusterFlags,
	"remove":          clusterFlags,
	"backup":          slices.Concat(bundleFlags, talosFlags),
	"backup etcd":     slices.Concat(bundleFlags, talosFlags),
	"backup verify":   bundleFlags, // --age-identity opens an encrypted snapshot
	"backup list":     nil,
	"backup prune":    nil,
	"completion bash": nil, "completion zsh": nil, "completion fish": nil, "completion powershell": nil,
}

// commandKey is a command's path without the root's name.
func commandKey(c *cobra.Command) string {
	if c.Root() == c {
		return ""
	}
	path := c.CommandPath()
	return path[len(c.Root().Name())+1:]
}

// helpShowsUsedFlags wraps root's help so that each command lists only the
// inherited flags it uses (globalFlagsUsed); the root lists all of them.
// The flags are hidden for the help's rendering only and shown again after.
func helpShowsUsedFlags(root *cobra.Command) {
	help := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		used, ok := globalFlagsUsed[commandKey(c)]
		if c == root || !ok {
			help(c, args)
			return
		}
		var hidden []*pflag.Flag
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && !slices.Contains(used, f.Name) && !slices.Contains(logFlags, f.Name) {
				f.Hidden = true
				hidden = append(hidden, f)
			}
		})
		defer func() {
			for _, f := range hidden {
				f.Hidden = false
			}
		}()
		help(c, args)
	})
}
