package sim

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// digQuestion is what a coredns-probe pod asks: dig's server, name and
// type, and its +tries.
type digQuestion struct {
	server, name, qtype string
	tries               int
}

// digQuestionOf reads a coredns-probe pod's command line (dnscheck's
// DigScript): `/bin/sh -c SCRIPT $0 SERVER NAME TYPE`, SCRIPT running
// `dig … "@$1" "$2" "$3"`. Anything else is not a DNS probe.
func digQuestionOf(p *corev1.Pod) (digQuestion, bool) {
	if len(p.Spec.Containers) == 0 {
		return digQuestion{}, false
	}

	c := p.Spec.Containers[0]
	argv := append(append([]string{}, c.Command...), c.Args...)

	if len(argv) < 7 || !strings.HasSuffix(argv[0], "sh") || argv[1] != "-c" || !strings.Contains(argv[2], "dig ") || !strings.Contains(argv[2], `"@$1" "$2" "$3"`) {
		return digQuestion{}, false
	}

	q := digQuestion{server: argv[4], name: argv[5], qtype: argv[6], tries: 3} // dig's default tries

	for f := range strings.FieldsSeq(argv[2]) {
		if v, ok := strings.CutPrefix(f, "+tries="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				q.tries = n
			}
		}
	}

	return q, true
}

// digOutcome is dig's exit code and output for a coredns-probe pod on m's
// node, as Cilium, CoreDNS and BIND's dig would make them:
//
//   - the query (UDP to SERVER:53) leaves the pod network only through the
//     node's agent: without kube-proxy replacement, with
//     CiliumPodNetworkBroken, or with no reconciled frontend for it, it
//     times out; a frontend without a backend (no CoreDNS pod Ready, so no
//     ready endpoint in kube-dns' EndpointSlice) is refused, as for the
//     connect probe (probe.go);
//   - a backend answers unless the machine its pod runs on has
//     CoreDNSNotAnswering; with none answering the query times out;
//   - the CoreDNS that answers serves the zones of its Corefile's
//     kubernetes plugin (ConfigMap kube-system/coredns, which Talos renders
//     with the cluster domain): a Service's name there is its ClusterIPs of
//     the family asked (TTL 30, the Corefile's ttl), a name there that is
//     no Service NXDOMAIN; a name outside goes to the forward plugin's
//     upstream, which knows no cluster's private domain (NXDOMAIN);
//   - dig prints what BIND 9.18's dig prints with +noall +comments +answer
//     (bin/dig/dighost.c): per try that got no reply, ";; communications
//     error to IP#53: timed out" (or "connection refused"), then ";; no
//     servers could be reached" and exit 9; a reply prints its header
//     lines and answer section, exit 0 (NXDOMAIN included).
func (f *Fleet) digOutcome(ctx context.Context, m *Machine, q digQuestion, byNode map[string]*Machine) (int, string) {
	noReply := func(why string) (int, string) {
		var b strings.Builder
		for range q.tries {
			fmt.Fprintf(&b, ";; communications error to %s#53: %s\n", q.server, why)
		}

		b.WriteString(";; no servers could be reached\n")

		return 9, b.String()
	}

	st, err := f.agentState(ctx, m)
	if err != nil || st.kprMode != "True" || m.snap().faults.CiliumPodNetworkBroken {
		return noReply("timed out")
	}

	var backends []simBackend

	found := false

	for _, fe := range st.frontends {
		if fe.ip == q.server && fe.port == 53 && fe.proto == "UDP" {
			if fe.status != "Done" {
				return noReply("timed out")
			}

			found, backends = true, fe.backends

			break
		}
	}

	switch {
	case !found:
		return noReply("timed out")
	case len(backends) == 0:
		return noReply("connection refused")
	}

	answering := false

	for _, b := range backends {
		if bm, ok := byNode[b.node]; !ok || !bm.snap().faults.CoreDNSNotAnswering {
			answering = true
		}
	}

	if !answering {
		return noReply("timed out")
	}

	status, records := f.coreDNSAnswer(ctx, q)

	return 0, digReply(q, status, records)
}

// coreDNSAnswer is what CoreDNS answers for q: its status and the answer
// section's records.
func (f *Fleet) coreDNSAnswer(ctx context.Context, q digQuestion) (string, []string) {
	kc := f.kubeClient()
	if kc == nil {
		return "SERVFAIL", nil
	}

	cm, err := kc.CoreV1().ConfigMaps(kubeSystem).Get(ctx, coreDNSName, metav1.GetOptions{})
	if err != nil {
		return "SERVFAIL", nil
	}

	name := strings.ToLower(strings.TrimSuffix(q.name, ".")) + "."

	for _, zone := range corefileZones(cm.Data["Corefile"]) {
		rest, ok := strings.CutSuffix(name, "."+zone)
		if !ok {
			continue
		}

		// <service>.<namespace>.svc: the only records the sim serves
		parts := strings.Split(rest, ".")
		if len(parts) != 3 || parts[2] != "svc" {
			return "NXDOMAIN", nil
		}

		svc, err := kc.CoreV1().Services(parts[1]).Get(ctx, parts[0], metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "NXDOMAIN", nil
		}

		if err != nil {
			return "SERVFAIL", nil
		}

		var records []string

		for _, ip := range svc.Spec.ClusterIPs {
			a, err := netip.ParseAddr(ip)
			if err != nil || a.Is4() != (q.qtype == "A") {
				continue
			}

			records = append(records, fmt.Sprintf("%s\t30\tIN\t%s\t%s", name, q.qtype, a))
		}

		return "NOERROR", records
	}

	return "NXDOMAIN", nil
}

// corefileZones are the zones of a Corefile's kubernetes plugin, each
// ending in a dot: "kubernetes cluster.local in-addr.arpa ip6.arpa {".
func corefileZones(corefile string) []string {
	for line := range strings.SplitSeq(corefile, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "kubernetes" {
			continue
		}

		var zones []string

		for _, z := range fields[1:] {
			if z == "{" {
				break
			}

			zones = append(zones, strings.ToLower(strings.TrimSuffix(z, "."))+".")
		}

		return zones
	}

	return nil
}

// digReply is a reply as dig +noall +comments +answer prints it.
func digReply(q digQuestion, status string, records []string) string {
	var b strings.Builder

	b.WriteString(";; Got answer:\n")
	fmt.Fprintf(&b, ";; ->>HEADER<<- opcode: QUERY, status: %s, id: %d\n", status, fnvSum(q.server+q.name)%65536)
	fmt.Fprintf(&b, ";; flags: qr aa rd; QUERY: 1, ANSWER: %d, AUTHORITY: 0, ADDITIONAL: 1\n\n", len(records))

	if len(records) > 0 {
		b.WriteString(";; ANSWER SECTION:\n")

		for _, r := range records {
			b.WriteString(r + "\n")
		}
	}

	return b.String()
}
