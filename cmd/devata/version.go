package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"devata.dev/devata/inventory"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func (a *app) newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print devata's version and the Talos and Kubernetes versions it defaults to",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			machinery := "unknown"
			if info, ok := debug.ReadBuildInfo(); ok {
				for _, dep := range info.Deps {
					if dep.Path == "github.com/siderolabs/talos/pkg/machinery" {
						machinery = dep.Version
					}
				}
			}
			fmt.Fprintf(a.streams.Out, "devata %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			fmt.Fprintf(a.streams.Out, "talos machinery %s; defaults: Talos %s, Kubernetes %s\n", machinery, inventory.DefaultTalosVersion, inventory.DefaultKubernetesVersion)
			return nil
		},
	}
}
