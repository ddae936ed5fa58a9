// Package dnscheck is the coredns checks: the cluster DNS Talos deploys
// (the CoreDNS Deployment k8s-app=kube-dns and its kube-dns Service) has
// its pods Ready and the Service ready endpoints (coredns, read from the
// Kubernetes API), and, with --probe, answers from every node's pod
// network (coredns-probe, a short-lived pod per node). It owns no
// Cilium check: routing the ClusterIP is netcheck's.
package dnscheck

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/checks/probe"
	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
)

// CheckCoreDNS is the check's name, as `devata drift --checks` takes it.
const CheckCoreDNS = "coredns"

// What Talos' bootstrap manifests name (k8stemplates/coredns.go).
const (
	namespace = "kube-system"
	selector  = "k8s-app=kube-dns"
	service   = "kube-dns"
)

// Options is what the coredns checks use besides the target: Probe, when
// set, adds coredns-probe (it creates a pod per node).
type Options struct {
	Probe *probe.Options
}

// Checks is the coredns check: the cluster's CoreDNS, read through the
// target's Kubernetes client once per pass and reported on each control
// plane; and with o.Probe the coredns-probe transaction on every machine:
// a pod pinned to the node resolves the kubernetes Service's name through
// kube-dns. Both fail open; without a Kubernetes client they are Unknown.
func Checks(o Options) []drift.Check[*target.Target] {
	cs := []drift.Check[*target.Target]{{Name: CheckCoreDNS, Rung: drift.RungResources, Applies: onControlPlanes, Run: run, Kubernetes: true}}
	if o.Probe != nil {
		p := o.Probe.WithDefaults()
		cs = append(cs, drift.Check[*target.Target]{
			Name: CheckProbe, Rung: drift.RungTransaction, Optional: "--probe", Kubernetes: true,
			Run: func(ctx context.Context, t *target.Target) []drift.Result { return runProbe(ctx, t, p) },
		})
	}
	return cs
}

func onControlPlanes(t *target.Target) bool { return t.Machine.IsControlPlane() }

// observationKey holds the pass's Observation.
type observationKey struct{}

func run(ctx context.Context, t *target.Target) []drift.Result {
	o := target.Shared(ctx, t, observationKey{}, func(ctx context.Context) (*Observation, bool) {
		o := Observe(ctx, t.Kube)
		// cut short by this machine's deadline: the next one reads again
		return o, ctx.Err() == nil
	})
	return evaluate(o)
}

// Observation is the cluster's CoreDNS as one read saw it.
type Observation struct {
	Err error
	// Deployments are the k8s-app=kube-dns Deployments in kube-system,
	// Replicas the sum of their spec.replicas.
	Deployments int
	Replicas    int
	// Ready and NotReady name the pods Talos' K8sPodReadyAssertion counts.
	Ready, NotReady []string
	// Service says whether the kube-dns Service exists; ReadyEndpoints
	// and Endpoints count the addresses of its EndpointSlices.
	Service                   bool
	ClusterIP                 string
	ClusterIPs                []string
	ReadyEndpoints, Endpoints int
}

// Observe reads the CoreDNS Deployment, its pods, the kube-dns Service and
// its EndpointSlices.
func Observe(ctx context.Context, kube kubernetes.Interface) *Observation {
	o := &Observation{}
	if kube == nil {
		o.Err = errors.New("no kubeconfig: the Kubernetes API was not consulted")
		return o
	}
	deps, err := kube.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		o.Err = fmt.Errorf("list Deployments %s in %s: %w", selector, namespace, err)
		return o
	}
	for _, d := range deps.Items {
		o.Deployments++
		r := 1 // the API server defaults replicas to 1
		if d.Spec.Replicas != nil {
			r = int(*d.Spec.Replicas)
		}
		o.Replicas += r
	}
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		o.Err = fmt.Errorf("list pods %s in %s: %w", selector, namespace, err)
		return o
	}
	for _, p := range pods.Items {
		// Talos' K8sPodReadyAssertion (pkg/cluster/check/kubernetes.go)
		// leaves out deleted, failed and completed pods
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || completed(&p) {
			continue
		}
		if podReady(&p) {
			o.Ready = append(o.Ready, p.Name)
		} else {
			o.NotReady = append(o.NotReady, p.Name)
		}
	}
	svc, err := kube.CoreV1().Services(namespace).Get(ctx, service, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return o
	case err != nil:
		o.Err = fmt.Errorf("get Service %s/%s: %w", namespace, service, err)
		return o
	}
	o.Service, o.ClusterIP, o.ClusterIPs = true, svc.Spec.ClusterIP, svc.Spec.ClusterIPs
	if len(o.ClusterIPs) == 0 && o.ClusterIP != "" {
		o.ClusterIPs = []string{o.ClusterIP}
	}
	slices, err := kube.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		o.Err = fmt.Errorf("list EndpointSlices of %s/%s: %w", namespace, service, err)
		return o
	}
	for _, es := range slices.Items {
		for _, ep := range es.Endpoints {
			o.Endpoints += len(ep.Addresses)
			// a nil ready is "unknown, take as ready" (discovery/v1 EndpointConditions)
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				o.ReadyEndpoints += len(ep.Addresses)
			}
		}
	}
	return o
}

func completed(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

const next = "kubectl -n kube-system get deploy,pods,endpointslices -l k8s-app=kube-dns -o wide; kubectl -n kube-system describe pods -l k8s-app=kube-dns"

func evaluate(o *Observation) []drift.Result {
	if o.Err != nil {
		n := "check that the Kubernetes API answers with the same credentials: kubectl -n kube-system get deploy coredns"
		if strings.HasPrefix(o.Err.Error(), "no kubeconfig") {
			n = "pass --kubeconfig (or set KUBECONFIG) so CoreDNS can be checked"
		}
		return []drift.Result{drift.Unknown(o.Err, n)}
	}
	if o.Deployments == 0 {
		// talosctl health skips it then (ErrSkipAssertion): cluster.coreDNS.disabled
		return []drift.Result{drift.InSync("no Deployment " + selector + " in kube-system: CoreDNS is not Talos' here (cluster.coreDNS.disabled), as talosctl health skips it")}
	}
	evidence := []string{
		fmt.Sprintf("Deployment %s: %d replicas; pods Ready %d [%s], not Ready %d [%s]", selector, o.Replicas, len(o.Ready), strings.Join(o.Ready, " "), len(o.NotReady), strings.Join(o.NotReady, " ")),
	}
	if o.Service {
		evidence = append(evidence, fmt.Sprintf("Service kube-dns %s: %d of %d endpoints ready", o.ClusterIP, o.ReadyEndpoints, o.Endpoints))
	}
	var problems []string
	switch {
	case len(o.Ready) == 0:
		problems = append(problems, "no CoreDNS pod is Ready")
	case len(o.NotReady) > 0:
		problems = append(problems, "CoreDNS pods not Ready: "+strings.Join(o.NotReady, ", "))
	case len(o.Ready) != o.Replicas:
		problems = append(problems, fmt.Sprintf("%d CoreDNS pods Ready, the Deployment wants %d", len(o.Ready), o.Replicas))
	}
	switch {
	case !o.Service:
		problems = append(problems, "no Service kube-dns in kube-system: pods cannot reach the cluster DNS")
	case o.ReadyEndpoints == 0:
		problems = append(problems, "Service kube-dns has no ready endpoint: names do not resolve in the cluster")
	}
	if len(problems) == 0 {
		return []drift.Result{drift.InSync(evidence...)}
	}
	return []drift.Result{drift.Drifted(strings.Join(problems, "; "),
		fmt.Sprintf("%d pods Ready, kube-dns with ready endpoints", o.Replicas),
		fmt.Sprintf("%d pods Ready, %d endpoints ready", len(o.Ready), o.ReadyEndpoints)).
		WithEvidence(evidence...).WithNext(next)}
}
