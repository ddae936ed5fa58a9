package main

import (
	"context"

	"github.com/spf13/cobra"

	"devata.dev/devata/internal/demo"
)

func (a *app) newDemoCommand() *cobra.Command {
	var flags struct{ kubernetes bool }
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "The whole story on an embedded simulated fleet: drift, faults, apply (no real machine is touched)",
		Long: `demo runs devata's main job on the homelab example embedded in the binary,
against a SIMULATED Talos fleet on loopback and a real kube-apiserver (envtest):

  render the example → start the fleet in maintenance mode → bootstrap it →
  drift (clean) → inject faults (a config
  edited behind devata's back, kubelet down on a worker, a machine unreachable)
  → drift (each reported) → apply → drift (clean but for the unreachable one)
  → a machine group by label and a held machine: apply reports it held and
  leaves it alone, then changes it once the hold is lifted → an etcd snapshot,
  every control plane's disk lost → bootstrap --recover-from → drift (clean)

The first run builds kube-apiserver and etcd from the Go module proxy (minutes,
once; --kubernetes=false skips Kubernetes and the kubelet check). Everything
is written to a temporary directory that is removed at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := demo.Run(cmd.Context(), demo.Options{
				Out: a.streams.Out, Err: a.streams.Err, Kubernetes: flags.kubernetes,
				Devata: func(ctx context.Context, args []string) int {
					return run(ctx, args, a.streams, a.getenv)
				},
				PrintRendered: printRendered, DescribeFleet: describeFleet,
			})
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&flags.kubernetes, "kubernetes", true, "run a real kube-apiserver for the kubelet check (built once on first use)")
	return cmd
}
