package dnscheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/checks/probe"
	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
)

// CheckProbe is the transaction check: it runs only with --probe.
const CheckProbe = "coredns-probe"

// DigScript is what a coredns-probe pod runs under /bin/sh -c: BIND's dig
// (agnhost's image has it) asks the server $1 for the name $2 of type $3,
// which stay positional parameters, never spliced into the script; what
// dig prints goes to the termination log, which the kubelet posts as the
// container's termination message whether dig succeeded or not
// (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go makes the
// file writable by any user). Two tries of two seconds, as a resolver
// with `options timeout:2 attempts:2` would wait.
const DigScript = `exec dig +time=2 +tries=2 +noall +comments +answer "@$1" "$2" "$3" >/dev/termination-log 2>&1`

// dig's exit code when no server replied (bin/dig/dighost.c: 9, "No reply
// from server").
const digNoReply = 9

// nextLogs is where a failed lookup is looked into first.
const nextLogs = "kubectl -n kube-system logs -l k8s-app=kube-dns --tail=50; kubectl -n kube-system get endpointslices -l kubernetes.io/service-name=kube-dns -o wide"

// Names is what one probe asks and expects: the kubernetes Service's name
// in the cluster domain, the kube-dns ClusterIP it asks, and the
// kubernetes Service's ClusterIP the answer must hold.
type Names struct {
	Name, Type string // kubernetes.default.svc.cluster.local., A or AAAA
	Server     string // kube-dns ClusterIP
	Want       string // kubernetes ClusterIP
}

// servicesKey holds the pass's kubernetes Service read.
type servicesKey struct{}

// apiService is the kubernetes Service's ClusterIPs, read once per pass.
type apiService struct {
	ips []string
	err error
}

// desiredProbe is what coredns-probe wants of every node.
const desiredProbe = "from the node's pod network, kubernetes.default.svc resolves through kube-dns to the kubernetes Service ClusterIP"

// runProbe is coredns-probe on one machine: the pass's CoreDNS and
// kubernetes Service reads (shared with the coredns check), then one pod
// on the node's pod network that asks kube-dns.
func runProbe(ctx context.Context, t *target.Target, opts probe.Options) []drift.Result {
	o := target.Shared(ctx, t, observationKey{}, func(ctx context.Context) (*Observation, bool) {
		o := Observe(ctx, t.Kube)
		return o, ctx.Err() == nil
	})
	if o.Err != nil {
		return evaluate(o)
	}
	if o.Deployments == 0 {
		return []drift.Result{drift.InSync("no Deployment " + selector + " in kube-system: CoreDNS is not Talos' here (cluster.coreDNS.disabled), nothing to resolve through")}
	}
	if !o.Service {
		return []drift.Result{drift.Drifted("no Service kube-dns in kube-system: pods have no cluster DNS to ask", desiredProbe, "no Service kube-dns").
			WithNext("kubectl -n kube-system get service kube-dns; Talos applies it with CoreDNS (talosctl get manifests 11-core-dns-svc)")}
	}
	api := target.Shared(ctx, t, servicesKey{}, func(ctx context.Context) (apiService, bool) {
		ips, err := readAPIService(ctx, t.Kube)
		return apiService{ips, err}, ctx.Err() == nil
	})
	if api.err != nil {
		return []drift.Result{drift.Unknown(api.err, "kubectl -n default get service kubernetes")}
	}
	n, err := namesFor(clusterDomain(t.Inventory), o.ClusterIPs, api.ips)
	if err != nil {
		return []drift.Result{drift.Unknown(err, "kubectl -n kube-system get service kube-dns -o yaml; kubectl -n default get service kubernetes -o yaml")}
	}
	node := t.Machine.Name // the Node's name, as the kubelet check has it
	r := probe.Run(ctx, t.Kube, opts, probe.Spec{
		Node: node, Network: "dns",
		Command:     []string{"/bin/sh", "-c", DigScript, CheckProbe, n.Server, n.Name, n.Type},
		Annotations: map[string]string{"devata.dev/probe-target": n.Server + ":53", "devata.dev/probe-name": n.Name},
	})
	return []drift.Result{judge(n, node, r, opts, fmt.Sprintf("Service kube-dns %s: %d of %d endpoints ready", o.ClusterIP, o.ReadyEndpoints, o.Endpoints))}
}

// clusterDomain is the inventory's cluster.network.dnsDomain (defaulted
// to cluster.local when the inventory is loaded).
func clusterDomain(inv *inventory.Inventory) string {
	if inv == nil || inv.Cluster.Network.DNSDomain == "" {
		return inventory.DefaultDNSDomain
	}
	return inv.Cluster.Network.DNSDomain
}

func readAPIService(ctx context.Context, kube kubernetes.Interface) ([]string, error) {
	svc, err := kube.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, errors.New("no Service default/kubernetes: the API server has not made it yet")
	}
	if err != nil {
		return nil, fmt.Errorf("get Service default/kubernetes: %w", err)
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	return ips, nil
}

// namesFor is the probe's question: the kubernetes Service's name in
// domain, asked of the kube-dns ClusterIP of the kubernetes Service's
// primary family (A for IPv4, AAAA for IPv6).
func namesFor(domain string, dnsIPs, apiIPs []string) (Names, error) {
	var want netip.Addr
	for _, s := range apiIPs {
		if a, err := netip.ParseAddr(s); err == nil {
			want = a
			break
		}
	}
	if !want.IsValid() {
		return Names{}, errors.New("Service default/kubernetes has no ClusterIP to expect")
	}
	var server netip.Addr
	for _, s := range dnsIPs {
		if a, err := netip.ParseAddr(s); err == nil && (!server.IsValid() || a.Is4() == want.Is4() && server.Is4() != want.Is4()) {
			server = a
		}
	}
	if !server.IsValid() {
		return Names{}, errors.New("Service kube-system/kube-dns has no ClusterIP to ask")
	}
	typ := "A"
	if want.Is6() {
		typ = "AAAA"
	}
	return Names{Name: "kubernetes.default.svc." + strings.TrimSuffix(domain, ".") + ".", Type: typ, Server: server.String(), Want: want.String()}, nil
}

// Answer is what dig printed, read: the reply's status (NOERROR, NXDOMAIN,
// SERVFAIL, …; empty when no reply came) and the addresses of the answer
// section's A and AAAA records.
type Answer struct {
	Status    string
	Addresses []string
}

var digStatus = regexp.MustCompile(`status: ([A-Z]+)`)

// ParseDig reads dig's +comments +answer output.
func ParseDig(out string) Answer {
	var a Answer
	if m := digStatus.FindStringSubmatch(out); m != nil {
		a.Status = m[1]
	}
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, ";") {
			continue
		}
		// name ttl class type data: "kubernetes.default.svc.cluster.local. 30 IN A 10.96.0.1"
		f := strings.Fields(line)
		if len(f) == 5 && f[2] == "IN" && (f[3] == "A" || f[3] == "AAAA") {
			a.Addresses = append(a.Addresses, f[4])
		}
	}
	return a
}

// judge is one probe pod's outcome as the check reports it.
func judge(n Names, node string, r probe.Result, opts probe.Options, seen string) drift.Result {
	what := fmt.Sprintf("from the pod network on node %s, %s %s through kube-dns %s", node, n.Name, n.Type, n.Server)
	if r.Err != nil {
		var f drift.Findings
		f.Saw(seen)
		f.Unknown(r.Err, probe.Next(r.Err, opts, node))
		return f.Result(desiredProbe, "")
	}
	words := oneLine(r.Message)
	a := ParseDig(r.Message)
	var problem string
	switch {
	case r.ExitCode == digNoReply:
		problem = "no reply: " + words
	case !r.Succeeded:
		problem = "dig failed: " + r.Failure()
	case a.Status != "NOERROR":
		problem = "answered " + cmp.Or(a.Status, "nothing") + ": " + statusLine(r.Message)
	case !slices.Contains(a.Addresses, n.Want):
		problem = fmt.Sprintf("answered %s, not the kubernetes Service ClusterIP %s", cmp.Or(strings.Join(a.Addresses, ", "), "no address"), n.Want)
	}
	if problem == "" {
		return drift.InSync(fmt.Sprintf("%s: %s (Service default/kubernetes), pod %s", what, strings.Join(a.Addresses, ", "), r.Pod), seen)
	}
	return drift.Drifted(what+": "+problem, desiredProbe, problem).WithEvidence(seen, "pod "+r.Pod).WithNext(nextLogs)
}

// oneLine is dig's lines as one, "; " between them, a line repeated (one
// per try) said once.
func oneLine(s string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

// statusLine is dig's header line, which carries the reply's status,
// without the query's id (a report that folds alike reasons would not
// fold them).
func statusLine(out string) string {
	for l := range strings.SplitSeq(out, "\n") {
		if strings.Contains(l, "status: ") {
			l, _, _ = strings.Cut(l, ", id: ")
			return strings.TrimSpace(l)
		}
	}
	return oneLine(out)
}
