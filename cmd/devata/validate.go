package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/spf13/cobra"

	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

func (a *app) newValidateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate",
		Short: "Decode, default and validate the inventory, render every config and validate it with Talos machinery",
		Long: `validate checks the inventory strictly (unknown fields, wrong types, duplicate
keys), applies defaults, validates every field, renders each machine's Talos
config and validates it as Talos would on bare metal. Nothing is sent to any
machine and nothing is written.

Ctrl-C (or SIGTERM) stops it between machines, however large the inventory.

Exit 0 valid, 1 invalid, 2 interrupted or could not complete.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			inv, err := inventory.LoadContext(ctx, a.settings.Inventory)
			if interrupted(err) {
				return exitWith(exitTrouble, err)
			}
			if err != nil {
				return a.invalid(err)
			}
			a.printWarnings(inv)
			bundle, throwaway, err := a.secretsForRender(inv)
			if err != nil {
				return exitWith(exitFailed, err)
			}
			rendered, err := render.ValidatedContext(ctx, inv, bundle)
			if interrupted(err) {
				return exitWith(exitTrouble, err)
			}
			printRendered(a.streams.Out, inv, rendered)
			if err != nil {
				return a.invalid(err)
			}
			summary := fmt.Sprintf("%s is valid: %s", inv.Path, describeFleet(inv))
			if throwaway {
				summary += " (rendered with a throwaway secrets bundle)"
			}
			fmt.Fprintln(a.streams.Out, summary)
			return nil
		},
	}
}

// interrupted says err is a pass stopped by Ctrl-C, SIGTERM or a deadline:
// that is trouble (exit 2), not an invalid inventory.
func interrupted(err error) bool {
	var ie *inventory.InterruptedError
	return errors.As(err, &ie)
}

// invalid prints every error of an invalid inventory and exits 1.
func (a *app) invalid(err error) error {
	fmt.Fprintln(a.streams.Err, err)
	n := len(inventory.FieldErrors(err))
	if n == 0 {
		n = 1
		if me, ok := err.(interface{ WrappedErrors() []error }); ok {
			n = len(me.WrappedErrors())
		}
	}
	return exitWith(exitFailed, fmt.Errorf("%s is invalid: %d %s; fix them and run devata validate again", a.settings.Inventory, n, plural(n, "error", "errors")))
}

func (a *app) printWarnings(inv *inventory.Inventory) {
	for _, w := range inv.Warnings {
		fmt.Fprintf(a.streams.Err, "warning: %s\n", w)
	}
}

// secretsForRender loads the inventory's secrets bundle, or makes a throwaway
// one in memory when none exists yet, so an inventory validates before any
// secret is created. Nothing is written.
func (a *app) secretsForRender(inv *inventory.Inventory) (*secrets.Bundle, bool, error) {
	path := inv.SecretsPath()
	b, err := a.loadSecrets(path)
	if err == nil {
		return b, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	fmt.Fprintf(a.streams.Err, "note: no secrets bundle at %s yet; rendering with a throwaway one (create the real one with: devata gen secrets)\n", path)
	b, err = render.NewSecrets(inv.Cluster.TalosVersion)
	return b, true, err
}

// printRendered prints a line per rendered config and machinery's warnings
// (validate's table, and the demo's).
func printRendered(w io.Writer, inv *inventory.Inventory, rendered []*render.Rendered) {
	if len(rendered) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MACHINE\tROLE\tADDRESS\tCONFIG\tPATCHES")
	for _, r := range rendered {
		m := inv.Machine(r.Machine)
		patches := strings.Join(r.Patches, ", ")
		if patches == "" {
			patches = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Machine, r.Role, m.Endpoint(), humanize.IBytes(uint64(len(r.Config))), patches)
	}
	tw.Flush()
	for _, r := range rendered {
		for _, warn := range r.Warnings {
			fmt.Fprintf(w, "warning: %s: %s\n", r.Machine, warn)
		}
	}
}

// describeFleet counts the inventory's machines by role.
func describeFleet(inv *inventory.Inventory) string {
	cps := len(inv.ControlPlanes())
	workers := len(inv.Machines) - cps
	return fmt.Sprintf("%d %s (%d control %s, %d %s)", len(inv.Machines), plural(len(inv.Machines), "machine", "machines"),
		cps, plural(cps, "plane", "planes"), workers, plural(workers, "worker", "workers"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// loadSecrets reads the bundle at path, opening an encrypted one with the
// age identities of ageIdentities.
func (a *app) loadSecrets(path string) (*secrets.Bundle, error) {
	return render.LoadSecretsWith(path, a.ageIdentities())
}

// ageIdentities are where every command that loads the bundle reads age
// identities from: the age-identity setting (--age-identity,
// DEVATA_AGE_IDENTITY, the settings file) when set, else devata's
// environment as sops reads it (SOPS_AGE_KEY, SOPS_AGE_KEY_FILE, sops'
// keys.txt).
func (a *app) ageIdentities() render.AgeIdentities {
	ids := render.AgeIdentitiesFromEnv(a.getenv)
	ids.Files = a.settings.AgeIdentity
	ids.AllowShared = a.settings.AllowSharedAgeIdentity
	return ids
}
