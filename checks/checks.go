// Package checks is devata's one list of checks, in the shape of Talos'
// DefaultClusterChecks (pkg/cluster/check/default.go): the machine checks,
// then the other families (storage, certificates, coredns, cilium), every
// one a drift.Check over the one target.Target, built in one place. Help text, --checks, the demo, bootstrap's closing report and
// reconcile take their names and properties from here. To add a check:
// write it in its family's package and add it to that family's Checks list;
// nothing else names it.
package checks

import (
	"fmt"
	"slices"
	"strings"

	"devata.dev/devata/certcheck"
	"devata.dev/devata/checks/probe"
	"devata.dev/devata/checks/target"
	"devata.dev/devata/dnscheck"
	"devata.dev/devata/drift"
	"devata.dev/devata/machines"
	"devata.dev/devata/netcheck"
	"devata.dev/devata/storagecheck"
)

// Family names a group of checks: the package that holds them.
type Family string

const (
	FamilyMachine Family = "machine" // package machines: Talos config, versions, stage, kubelet, etcd
	FamilyStorage Family = "storage" // package storagecheck: volumes and mounts
	FamilyNet     Family = "net"     // package netcheck: Cilium kube-proxy-free routing
	FamilyCerts   Family = "certs"   // package certcheck: credentials that expire
	FamilyDNS     Family = "dns"     // package dnscheck: the cluster DNS
)

// Entry is one check as the catalogue lists it: what it is (name, rung,
// policy, properties: drift.Info) and its family.
type Entry struct {
	drift.Info
	Family Family
}

// Registry is a list of checks in report order. A Registry is a value: a
// caller (a test) that adds to one (With) changes no one else's.
type Registry []Entry

// All lists every check in the order reports show them: the machine
// checks, then storage, certificates, coredns, then cilium, optional ones
// included (each family's after its own: coredns-probe, cilium-probe).
// Each call returns a new Registry.
func All() Registry {
	var out Registry
	add := func(f Family, infos ...drift.Info) {
		for _, i := range infos {
			out = append(out, Entry{Info: i, Family: f})
		}
	}
	add(FamilyMachine, drift.Infos(machines.Checks())...)
	add(FamilyStorage, drift.Infos(storagecheck.Checks())...)
	add(FamilyCerts, drift.Infos(certcheck.Checks(certcheck.Options{}))...)
	add(FamilyDNS, drift.Infos(dnscheck.Checks(dnscheck.Options{Probe: &probe.Options{}}))...)
	add(FamilyNet, drift.Infos(netcheck.Checks(netcheck.Options{Probe: &probe.Options{}}))...)
	return out
}

// With is a copy of r with more checks after its own.
func (r Registry) With(more ...Entry) Registry {
	return append(slices.Clip(slices.Clone(r)), more...)
}

// Names returns the name of every check of r, optional ones included.
func (r Registry) Names() []string {
	out := make([]string, 0, len(r))
	for _, e := range r {
		out = append(out, e.Name)
	}
	return out
}

// Of returns the names of the checks of the given families that always run.
func (r Registry) Of(families ...Family) []string {
	var out []string
	for _, e := range r {
		if slices.Contains(families, e.Family) && e.Optional == "" {
			out = append(out, e.Name)
		}
	}
	return out
}

// Get returns the check of that name.
func (r Registry) Get(name string) (Entry, bool) {
	i := slices.IndexFunc(r, func(e Entry) bool { return e.Name == name })
	if i < 0 {
		return Entry{}, false
	}
	return r[i], true
}

// Validate refuses a --checks name r does not have, with the nearest one
// it has: a typo on the command line, found before anything is dialled.
func (r Registry) Validate(names []string) error {
	return validate(names, r.Names())
}

// validate is Validate against the names a pass has (FleetCheck.Select).
func validate(names, have []string) error {
	for _, n := range names {
		if !slices.Contains(have, n) {
			return fmt.Errorf("--checks: no check %q%s (have %s)", n, didYouMean(n, have), strings.Join(have, ", "))
		}
	}
	return nil
}

// Names returns the name of every check in All, optional ones included.
func Names() []string { return All().Names() }

// Of returns the names of All's checks of the given families that always run.
func Of(families ...Family) []string { return All().Of(families...) }

// Options gives the families what they use besides the target (which
// carries the Talos connection and the Kubernetes client).
type Options struct {
	// Exec reaches the Cilium agents (pods/exec); nil leaves the agents'
	// own status Unknown.
	Exec netcheck.Execer
	// Probe, when set, adds the probe checks, coredns-probe and
	// cilium-probe (they create pods).
	Probe *probe.Options
	// Certs is what the certificates check reads besides the machines (the
	// dialer's talosconfig, the kubeconfig) and its threshold.
	Certs certcheck.Options
}

// Families is the checks of every family but the machine checks, in All's
// order, with what they use besides the target (FleetCheck.Families). What
// they read once per pass they keep on the pass, not here: one list serves
// any number of passes.
func Families(o Options) []drift.Check[*target.Target] {
	var out []drift.Check[*target.Target]
	out = append(out, storagecheck.Checks()...)
	out = append(out, certcheck.Checks(o.Certs)...)
	out = append(out, dnscheck.Checks(dnscheck.Options{Probe: o.Probe})...)
	return append(out, netcheck.Checks(netcheck.Options{Exec: o.Exec, Probe: o.Probe})...)
}
