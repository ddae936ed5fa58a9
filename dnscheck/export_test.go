package dnscheck

import (
	"devata.dev/devata/checks/probe"
	"devata.dev/devata/drift"
)

// JudgeForTest is coredns-probe's verdict on one pod's outcome.
func JudgeForTest(n Names, node string, r probe.Result) drift.Result {
	return judge(n, node, r, probe.Options{}, "Service kube-dns 10.96.0.10: 2 of 2 endpoints ready")
}
