// Package checks is devata's one list of checks, in the shape of Talos'
// DefaultClusterChecks (pkg/cluster/check/default.go): the machine checks,
// then each family that rides on their connection (storage, cilium), built in
// one place. Help text, --checks, the demo and bootstrap's closing report
// take their names from here. To add a check: write it in its family's
// package and add it to that family's Checks list; nothing else names it.
package checks

import (
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/certcheck"
	"devata.dev/devata/dnscheck"
	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
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

// Entry is one check as the catalogue lists it.
type Entry struct {
	drift.Info
	Family Family
	// Optional is empty for a check that always runs, else the flag that
	// turns it on ("--probe").
	Optional string
}

// All lists every check in the order reports show them: the machine
// checks, then storage, certificates, coredns, then cilium, optional ones included
// (last: help text cuts a list at "(with --probe)").
func All() []Entry {
	var out []Entry
	add := func(f Family, optional string, infos ...drift.Info) {
		for _, i := range infos {
			out = append(out, Entry{Info: i, Family: f, Optional: optional})
		}
	}
	add(FamilyMachine, "", drift.Infos(machines.Checks())...)
	add(FamilyStorage, "", drift.Infos(storagecheck.Checks())...)
	add(FamilyCerts, "", certcheck.Info())
	add(FamilyDNS, "", dnscheck.Info())
	add(FamilyNet, "", drift.Infos(netcheck.Checks())...)
	add(FamilyNet, "--probe", netcheck.ProbeCheck(nil, netcheck.ProbeOptions{}).Info())
	return out
}

// Names returns the name of every check in All, optional ones included.
func Names() []string {
	var out []string
	for _, e := range All() {
		out = append(out, e.Name)
	}
	return out
}

// Of returns the names of the checks of the given families that always run.
func Of(families ...Family) []string {
	var out []string
	for _, e := range All() {
		for _, f := range families {
			if e.Family == f && e.Optional == "" {
				out = append(out, e.Name)
			}
		}
	}
	return out
}

// Options gives the families what they read beyond the Talos connection.
type Options struct {
	// Kube is the cluster's Kubernetes API; nil makes the Kubernetes-side
	// findings Unknown.
	Kube kubernetes.Interface
	// Exec reaches the Cilium agents (pods/exec); nil leaves the agents'
	// own status Unknown.
	Exec netcheck.Execer
	// Probe, when set, adds cilium-probe (it creates pods).
	Probe *netcheck.ProbeOptions
	// Certs is what the certificates check reads besides the machines (the
	// dialer's talosconfig, the kubeconfig) and its threshold.
	Certs certcheck.Options
}

// Extensions builds the families that ride on the machine checks for one
// pass over inv (FleetCheck.Extensions), in All's order. Build them
// per pass: the cilium family keeps one Kubernetes snapshot per pass.
func Extensions(inv *inventory.Inventory, o Options) []machines.Extension {
	var opts []netcheck.Option
	if o.Probe != nil {
		opts = append(opts, netcheck.WithProbe(*o.Probe))
	}
	return []machines.Extension{storagecheck.Extension(), certcheck.Extension(o.Certs), dnscheck.Extension(o.Kube), netcheck.Extension(o.Kube, o.Exec, inv, opts...)}
}
