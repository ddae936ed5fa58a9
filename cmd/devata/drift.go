package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"devata.dev/devata/checks"
	"devata.dev/devata/checks/probe"
	"devata.dev/devata/config"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/outfile"
)

// driftFlags are drift's flags.
type driftFlags struct {
	machines, checks    []string
	junitFile, promFile string
	htmlFile            string
	stream, all         bool
	probe               bool
	probeOpts           probe.Options
	certDays            int
}

func (a *app) newDriftCommand() *cobra.Command {
	var flags driftFlags
	cmd := &cobra.Command{
		Use:   "drift",
		Short: "Observe every machine and report desired-vs-actual drift",
		Long: `drift renders each machine's desired config from the inventory, observes every
machine over the Talos API (and Kubernetes, with a kubeconfig) and reports,
per machine and check, InSync, Drifted or Unknown (could not observe).

One unreachable machine never stops the others: it is reported as Unknown.
Nothing is changed anywhere, except with --probe: then, per node, short-lived
pods connect to the kubernetes Service ClusterIP (cilium-probe: one on the host
network, one on the pod network) and resolve its name through kube-dns
(coredns-probe: one on the pod network), and are deleted when they end
(deploy/netcheck-probe.yaml has the namespace and RBAC they need).

Checks: ` + a.checkList() + `.
See docs/checks.md, docs/checks-storage.md and docs/checks-netcheck.md.

Exit 0 all in sync, 1 drift found, 2 could not complete (any Unknown or an error).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.drift(cmd.Context(), flags)
		},
	}
	config.AddOutputFlag(cmd.Flags())
	addMachinesFlags(cmd, &flags.machines)
	cmd.Flags().StringSliceVar(&flags.checks, "checks", nil, "only these checks (comma-separated): "+a.checkList())
	cmd.Flags().BoolVar(&flags.probe, "probe", false, "also run the probe checks: per node, cilium-probe (a host-network and a pod-network pod connect to the kubernetes Service ClusterIP) and coredns-probe (a pod-network pod resolves kubernetes.default.svc through kube-dns); pods created, awaited, always deleted")
	cmd.Flags().StringVar(&flags.probeOpts.Namespace, "probe-namespace", probe.DefaultNamespace, "namespace of the --probe pods (the host-network one needs Pod Security level privileged there)")
	cmd.Flags().StringVar(&flags.probeOpts.Image, "probe-image", probe.DefaultImage, "image of the --probe pods (it must have agnhost's connect subcommand, /bin/sh and BIND's dig, as agnhost has)")
	cmd.Flags().DurationVar(&flags.probeOpts.Timeout, "probe-timeout", probe.DefaultTimeout, "how long a --probe pod may take from creation to its end (image pull included)")
	addCertDaysFlag(cmd, &flags.certDays)
	cmd.Flags().BoolVar(&flags.all, "all", false, fmt.Sprintf("the table lists every machine (past %d machines it lists those not in sync and counts the rest)", drift.SummaryAbove))
	cmd.Flags().StringVar(&flags.junitFile, "junit-file", "", "also write the report as JUnit XML to this file")
	cmd.Flags().StringVar(&flags.htmlFile, "html-file", "", "also write the report as one self-contained HTML page to this file (what -o html prints)")
	cmd.Flags().BoolVar(&flags.stream, "stream", false, "write the JSON report as machines finish, holding no results (for very large fleets; results in arrival order; not with --junit-file/--prom-file/--html-file)")
	cmd.Flags().StringVar(&flags.promFile, "prom-file", "", "also write the report as a Prometheus textfile (atomically) to this path")
	return cmd
}

// checkList names every check for help text, with the flag an optional one
// needs: "config, …, coredns, coredns-probe (with --probe), …".
func (a *app) checkList() string {
	var names []string
	for _, e := range a.registry() {
		n := e.Name
		if e.Optional != "" {
			n += " (with " + e.Optional + ")"
		}
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}

// drift observes the machines and reports in the -o format (JSON streamed
// with --stream), and as JUnit, an HTML page or a Prometheus textfile beside it.
func (a *app) drift(ctx context.Context, flags driftFlags) error {
	format, err := drift.ParseFormat(a.settings.Output)
	if err != nil {
		return usageError(err)
	}
	if flags.stream && (format != drift.FormatJSON || flags.junitFile != "" || flags.promFile != "" || flags.htmlFile != "") {
		return usageError(errors.New("--stream writes JSON as it goes: use it with -o json and without --junit-file, --prom-file or --html-file"))
	}
	if err := a.registry().Validate(flags.checks); err != nil {
		return usageError(err)
	}
	if err := checkCertDays(flags.certDays); err != nil {
		return err
	}
	for _, name := range flags.checks {
		if e, _ := a.registry().Get(name); e.Optional == "--probe" && !flags.probe {
			return usageError(fmt.Errorf("%s creates pods in the cluster: it runs only with --probe", name))
		}
	}
	// an output file that would not be written is said before any machine is asked
	for _, path := range []string{flags.junitFile, flags.htmlFile, flags.promFile} {
		if path == "" {
			continue
		}
		if _, err := outfile.Check(path); err != nil {
			return exitWith(exitTrouble, err)
		}
	}
	s, err := a.openSession(ctx, true, flags.machines...)
	if err != nil {
		return err
	}
	fc := a.fleetCheck(s.inv, s.desired.Held(), s.dialer, s.kube, s.exec)
	fc.DesiredFor = s.desired.For
	co := checks.Options{Exec: s.exec, Certs: a.certOptions(s.inv, s.dialer)}
	co.Certs.Threshold = certThreshold(flags.certDays)
	if flags.probe {
		co.Probe = &flags.probeOpts
	}
	fc.Families = checks.Families(co)
	fc.Machines, fc.Checks = s.only, flags.checks
	ms, _, err := fc.Select()
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	fc.Done = a.progress(len(ms))
	h := a.reportHeader(ctx, s.inv)
	if flags.stream {
		return a.driftStream(ctx, fc, fc.Header(h, ms))
	}
	rep, err := fc.Report(ctx, h)
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	if err := drift.Render(a.streams.Out, format, rep, drift.TableOptions{Color: drift.AutoColor(a.streams.Out, a.getenv), All: flags.all}); err != nil {
		return exitWith(exitTrouble, err)
	}
	if flags.junitFile != "" {
		if err := writeFileWith(flags.junitFile, func(w io.Writer) error { return drift.WriteJUnit(w, rep) }); err != nil {
			return exitWith(exitTrouble, err)
		}
	}
	if flags.htmlFile != "" {
		if err := writeFileWith(flags.htmlFile, func(w io.Writer) error { return drift.WriteHTML(w, rep) }); err != nil {
			return exitWith(exitTrouble, err)
		}
	}
	if flags.promFile != "" {
		if err := drift.WritePromTextfile(flags.promFile, rep); err != nil {
			return exitWith(exitTrouble, err)
		}
	}
	if code := rep.ExitCode(); code != 0 {
		return exitWith(code, nil)
	}
	return nil
}

// driftStream writes the JSON report as machines finish, holding no
// results: for fleets too large to keep a report in memory.
func (a *app) driftStream(ctx context.Context, fc *checks.FleetCheck, h drift.Header) error {
	st := drift.NewJSONStream(a.streams.Out)
	if err := st.Begin(h); err != nil {
		return exitWith(exitTrouble, err)
	}
	if err := fc.Run(ctx, st); err != nil {
		st.AddError(err)
	}
	if err := st.Close(); err != nil {
		return exitWith(exitTrouble, err)
	}
	if code := st.ExitCode(); code != 0 {
		return exitWith(code, nil)
	}
	return nil
}
