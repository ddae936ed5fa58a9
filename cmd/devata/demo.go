package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/examples"
	"devata.dev/devata/inventory"
)

func (a *app) newDemoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run devata's main job on the embedded example (no real machine is touched)",
		Long: `demo runs on the homelab example embedded in the binary: it validates the
inventory, makes a throwaway secrets bundle in memory, renders and validates
every machine's Talos config, and shows the result. It touches no real machine
and writes only to a temporary directory it removes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := a.streams.Out
			dir, err := os.MkdirTemp("", "devata-demo-")
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			defer os.RemoveAll(dir)

			step := func(name string) func(string, ...any) {
				start := time.Now()
				fmt.Fprintf(out, "==> %s\n", name)
				return func(format string, args ...any) {
					fmt.Fprintf(out, "    %s (%s)\n", fmt.Sprintf(format, args...), time.Since(start).Round(time.Millisecond))
				}
			}

			done := step("inventory: examples/homelab/inventory.yaml (embedded)")
			path, err := examples.WriteHomelab(dir)
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			inv, err := inventory.Load(path)
			if err != nil {
				return exitWith(exitTrouble, fmt.Errorf("the embedded example is invalid (a devata bug): %w", err))
			}
			done("valid: %s", describeFleet(inv))

			done = step("secrets: a throwaway bundle, in memory only")
			b, err := bootstrap.NewSecrets(inv.Cluster.TalosVersion)
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			done("generated for Talos %s", inv.Cluster.TalosVersion)

			done = step("render: each machine's Talos config, validated by Talos machinery (metal mode)")
			rendered, err := bootstrap.RenderValidated(inv, b)
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			printRendered(out, inv, rendered)
			done("%d configs rendered and valid", len(rendered))

			fmt.Fprintln(out, "\nThis demo stops at rendering: the simulated Talos fleet that drift and apply run against is not built yet.")
			fmt.Fprintln(out, "Next: devata validate -i examples/homelab/inventory.yaml, then devata gen secrets and devata gen config -o DIR.")
			return nil
		},
	}
}
