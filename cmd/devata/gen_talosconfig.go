package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/spf13/cobra"

	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

func (a *app) newGenTalosconfigCommand() *cobra.Command {
	var flags genTalosconfigFlags
	cmd := &cobra.Command{
		Use:   "talosconfig",
		Short: "Sign a fresh talosconfig from the secrets bundle's OS CA (mode 0600)",
		Long: `gen talosconfig signs a new Talos API client certificate with the roles asked
from the secrets bundle's OS CA, and writes a talosconfig with it (mode 0600):
endpoints the control planes, nodes every machine. It is what
talosctl config new does through a control plane's API
(GenerateClientConfiguration), done offline from the bundle: it renews a
talosconfig that is about to expire (the certificates check says when) even
when no control plane answers.

Roles are Talos' own (os:admin, os:operator, os:reader, os:etcd:backup,
os:impersonator); an unknown one is refused, as talosctl refuses it. An existing file is kept
unless --force, and only a regular file is ever replaced.`,
		Example: `  devata gen talosconfig --roles os:reader --ttl 720h --file reader.talosconfig
  devata gen talosconfig --roles os:admin --ttl 8760h --file talosconfig.new --force`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.genTalosconfig(cmd, &flags)

		},
	}
	cmd.Flags().StringSliceVar(&flags.roles, "roles", role.MakeSet(role.Admin).Strings(), "Talos roles of the certificate: "+strings.Join(talosRoles(), ", "))
	cmd.Flags().DurationVar(&flags.ttl, "ttl", constants.TalosAPIDefaultCertificateValidityDuration, "certificate lifetime (talosctl config new's --crt-ttl; 8760h is a year)")
	cmd.Flags().StringVar(&flags.file, "file", "talosconfig", "path to write (0600)")
	cmd.Flags().BoolVar(&flags.force, "force", false, "replace an existing regular file")
	return cmd
}

// genTalosconfigFlags are the flags of gen talosconfig.
type genTalosconfigFlags struct {
	roles []string
	ttl   time.Duration
	file  string
	force bool
}

func (a *app) genTalosconfig(cmd *cobra.Command, f *genTalosconfigFlags) error {
	roles, unknown := role.Parse(f.roles)
	if len(unknown) > 0 {
		return usageError(fmt.Errorf("--roles: unknown role %s: Talos has %s", strings.Join(unknown, ", "), strings.Join(talosRoles(), ", ")))
	}
	if len(roles.Strings()) == 0 {
		return usageError(errors.New("--roles: give at least one role: " + strings.Join(talosRoles(), ", ")))
	}
	if f.ttl <= 0 {
		// as GenerateClientConfiguration refuses it: "crt_ttl should be positive"
		return usageError(fmt.Errorf("--ttl %s: the certificate's lifetime must be positive (8760h is a year)", f.ttl))
	}
	if f.file == "" {
		return usageError(errors.New("--file: give the path to write"))
	}
	if st, err := os.Lstat(f.file); err == nil && !st.Mode().IsRegular() {
		return exitWith(exitTrouble, fmt.Errorf("%s is not a regular file (%s): not replacing it; give another --file", f.file, st.Mode().Type()))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return exitWith(exitTrouble, err)
	}
	inv, b, err := a.loadInventoryAndSecrets()
	if err != nil {
		return err
	}
	// machined's GenerateClientConfiguration signs with the bundle's
	// OS CA (v1alpha1_server.go); a loaded bundle's clock is now
	crt, err := b.GenerateTalosAPIClientCertificateWithTTL(roles, f.ttl)
	if err != nil {
		return exitWith(exitTrouble, fmt.Errorf("sign the client certificate with %s's OS CA: %w", inv.SecretsPath(), err))
	}
	// the context name Talos gives it: role@cluster for one role
	name := inv.Cluster.Name
	if r := roles.Strings(); len(r) == 1 {
		name = strings.TrimPrefix(r[0], role.Prefix) + "@" + name
	}
	var endpoints, nodes []string
	for _, m := range inv.ControlPlanes() {
		if m.Port == inventory.DefaultTalosAPIPort {
			endpoints = append(endpoints, m.Address)
		} else {
			endpoints = append(endpoints, m.Endpoint())
		}
	}
	for i := range inv.Machines {
		nodes = append(nodes, inv.Machines[i].Address)
	}
	tc := clientconfig.NewConfig(name, endpoints, b.Certs.OS.Crt, crt)
	tc.Contexts[name].Nodes = nodes
	data, err := tc.Bytes()
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	if err := render.WriteSecretFile(f.file, data, f.force); err != nil {
		return exitWith(exitTrouble, err)
	}
	fmt.Fprintf(a.streams.Out, "wrote %s: context %s, roles %s, valid until %s\n", f.file, name, strings.Join(roles.Strings(), ","), time.Now().Add(f.ttl).UTC().Format(time.RFC3339))
	return nil
}

// talosRoles are the roles Talos grants (role.All, the set role.Parse
// and talosctl config new accept).
func talosRoles() []string {
	r := role.All.Strings()
	slices.Sort(r)
	return r
}
