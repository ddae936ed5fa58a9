package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/spf13/cobra"

	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

func (a *app) newGenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gen",
		Short: "Generate the secrets bundle, the rendered machine configs or a talosconfig",
	}
	cmd.AddCommand(a.newGenSecretsCommand(), a.newGenConfigCommand(), a.newGenTalosconfigCommand())
	return cmd
}

func (a *app) newGenSecretsCommand() *cobra.Command {
	var flags genSecretsFlags
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Write a talosctl-compatible secrets bundle (mode 0600)",
		Long: `gen secrets writes a new secrets bundle in the format of talosctl gen secrets,
with mode 0600. It never replaces an existing file unless --force is given.

With --from-controlplane-config it recovers the bundle from a control-plane
machine config instead (for reconstruction when the bundle is lost).

With --encrypt-to AGE_RECIPIENT (repeatable) the bundle is written as an
ASCII-armored age file encrypted to every recipient, so that it can be kept
in Git; the clear text never reaches the disk. Every command that loads the
bundle decrypts it in memory with the age identity files given with
--age-identity FILE (repeatable; DEVATA_AGE_IDENTITY, age-identity in the
settings file), or else with the identity in SOPS_AGE_KEY_FILE (or
SOPS_AGE_KEY, or sops' ~/.config/sops/age/keys.txt). A sops YAML file with
age recipients is read the same way.

The output path defaults to the inventory's cluster.secrets when the inventory
exists, else ./secrets.yaml.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.genSecrets(cmd, &flags)

		},
	}
	cmd.Flags().StringVar(&flags.output, "file", "", "bundle path (default: the inventory's cluster.secrets, else secrets.yaml)")
	deprecatedPathOutput(cmd, a.streams.Err, &flags.output, "--file")
	cmd.Flags().StringVar(&flags.talosVersion, "talos-version", "", "Talos version whose contract the bundle follows (default: the inventory's, else "+inventory.DefaultTalosVersion+")")
	cmd.Flags().StringVar(&flags.fromConfig, "from-controlplane-config", "", "recover the bundle from this control-plane machine config")
	cmd.Flags().StringArrayVar(&flags.encryptTo, "encrypt-to", nil, "age recipient (age1…) to encrypt the bundle to, as armored age; repeatable")
	cmd.Flags().BoolVar(&flags.force, "force", false, "replace an existing bundle")
	return cmd
}

// genSecretsFlags are the flags of gen secrets.
type genSecretsFlags struct {
	output, talosVersion, fromConfig string
	encryptTo                        []string
	force                            bool
}

func (a *app) genSecrets(cmd *cobra.Command, f *genSecretsFlags) error {
	out, version := f.output, f.talosVersion
	if inv, err := inventory.Load(a.settings.Inventory); err == nil {
		if out == "" {
			out = inv.SecretsPath()
		}
		if version == "" {
			version = inv.Cluster.TalosVersion
		}
	} else if !errors.Is(err, os.ErrNotExist) && cmd.Flags().Changed("inventory") {
		return exitWith(exitTrouble, fmt.Errorf("%w\n(gen secrets reads the inventory for its secrets path and Talos version)", err))
	}
	if out == "" {
		out = "secrets.yaml"
	}
	if version == "" {
		version = inventory.DefaultTalosVersion
	}
	var to render.AgeRecipients
	if len(f.encryptTo) > 0 {
		var err error
		if to, err = render.ParseAgeRecipients(f.encryptTo); err != nil {
			return exitWith(exitUsage, fmt.Errorf("--encrypt-to: %w", err))
		}
	}
	if !f.force {
		if _, err := os.Lstat(out); err == nil {
			return exitWith(exitTrouble, fmt.Errorf("%s exists: not replacing a secrets bundle (it may be the only key to a running cluster); pass --force after keeping a copy", out))
		}
	}
	var (
		b   *secrets.Bundle
		err error
	)
	if f.fromConfig != "" {
		b, err = render.SecretsFromConfig(f.fromConfig)
	} else {
		fmt.Fprintf(a.streams.Err, "generating secrets for Talos %s (a few seconds: RSA-4096)…\n", version)
		b, err = render.NewSecrets(version)
	}
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	how := "new"
	if f.fromConfig != "" {
		how = "recovered from " + f.fromConfig
	}
	if to != nil {
		if err := render.WriteSecretsEncrypted(out, b, to, f.force); err != nil {
			return exitWith(exitTrouble, err)
		}
		fmt.Fprintf(a.streams.Out, "wrote %s secrets bundle %s, age-encrypted (armored) to %d %s (mode 0600): devata opens it with --age-identity FILE or %s set to a matching identity file; back that identity up, without it the bundle cannot be opened\n",
			how, out, len(to), plural(len(to), "recipient", "recipients"), render.EnvAgeKeyFile)
		return nil
	}
	if err := render.WriteSecrets(out, b, f.force); err != nil {
		return exitWith(exitTrouble, err)
	}
	fmt.Fprintf(a.streams.Out, "wrote %s secrets bundle %s (mode 0600): keep it safe and backed up; it holds every CA key of the cluster\n", how, out)
	return nil
}

func (a *app) newGenConfigCommand() *cobra.Command {
	var flags struct {
		dir   string
		force bool
	}
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Write each machine's rendered config and a talosconfig (mode 0600)",
		Long: `gen config renders every machine's Talos config from the inventory and the
secrets bundle, validates it, and writes DIR/<machine>.yaml plus DIR/talosconfig
(an os:admin client config; endpoints are the control planes, nodes every
machine), all mode 0600 since they hold cluster secrets.

A file whose content would not change is left alone; one that would change is
only replaced with --force. An existing talosconfig is kept unless --force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inv, b, err := a.loadInventoryAndSecrets()
			if err != nil {
				return err
			}
			rendered, err := render.Validated(inv, b)
			if err != nil {
				return a.invalid(err)
			}
			if err := os.MkdirAll(flags.dir, 0o700); err != nil {
				return exitWith(exitTrouble, err)
			}
			var problems []error
			for _, r := range rendered {
				path := filepath.Join(flags.dir, r.Machine+".yaml")
				status, err := writeRendered(path, r.Config, flags.force)
				if err != nil {
					problems = append(problems, err)
					continue
				}
				fmt.Fprintf(a.streams.Out, "%-9s %s\n", status, path)
			}
			tcPath := filepath.Join(flags.dir, "talosconfig")
			if _, err := os.Lstat(tcPath); err == nil && !flags.force {
				fmt.Fprintf(a.streams.Out, "%-9s %s (exists; --force makes a new client certificate)\n", "kept", tcPath)
			} else {
				r, err := render.NewRenderer(inv, b)
				if err != nil {
					return exitWith(exitTrouble, err)
				}
				tc, err := r.Talosconfig()
				if err != nil {
					return exitWith(exitTrouble, err)
				}
				if err := render.WriteSecretFile(tcPath, tc, true); err != nil {
					return exitWith(exitTrouble, err)
				}
				fmt.Fprintf(a.streams.Out, "%-9s %s\n", "wrote", tcPath)
			}
			if len(problems) > 0 {
				for _, p := range problems {
					fmt.Fprintln(a.streams.Err, p)
				}
				return exitWith(exitTrouble, fmt.Errorf("%d %s not written", len(problems), plural(len(problems), "file", "files")))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&flags.dir, "dir", ".", "directory to write into")
	deprecatedPathOutput(cmd, a.streams.Err, &flags.dir, "--dir")
	cmd.Flags().BoolVar(&flags.force, "force", false, "replace files whose content changed, and the talosconfig")
	return cmd
}

// loadInventoryAndSecrets loads the inventory, printing its warnings, and
// the secrets bundle it names: what gen config and gen talosconfig render
// from. Its error is the command's, with the exit code.
func (a *app) loadInventoryAndSecrets() (*inventory.Inventory, *secrets.Bundle, error) {
	inv, err := inventory.Load(a.settings.Inventory)
	if err != nil {
		return nil, nil, a.invalid(err)
	}
	a.printWarnings(inv)
	b, err := a.loadSecrets(inv.SecretsPath())
	if err != nil {
		return nil, nil, exitWith(exitTrouble, err)
	}
	return inv, b, nil
}

// writeRendered writes a config 0600 unless it is already there unchanged.
func writeRendered(path string, data []byte, force bool) (string, error) {
	old, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(old, data):
		return "unchanged", nil
	case err == nil && !force:
		return "", fmt.Errorf("%s exists with other content: not replacing it (pass --force)", path)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return "", err
	}
	if err := render.WriteSecretFile(path, data, true); err != nil {
		return "", err
	}
	if old != nil {
		return "replaced", nil
	}
	return "wrote", nil
}

// deprecatedPathOutput keeps -o/--output working where it named a path,
// with a deprecation notice naming the flag that does now: across devata
// -o is a format (drift, plan, apply, upgrade), never a path (issue 33).
func deprecatedPathOutput(cmd *cobra.Command, stderr io.Writer, p *string, now string) {
	cmd.Flags().SetOutput(stderr) // the notice, which pflag writes to os.Stderr otherwise
	cmd.Flags().StringVarP(p, "output", "o", *p, "deprecated: "+now)
	_ = cmd.Flags().MarkDeprecated("output", "use "+now+" (in devata -o/--output is a report format)")
}
