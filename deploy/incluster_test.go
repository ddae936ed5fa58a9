//go:build incluster

// The in-cluster test: devata run as deploy/'s drift CronJob and reconcile
// Deployment run it, with a pod's credentials and nothing else. It needs
// root (mount namespaces) and unshare from util-linux, so it sits behind
// the build tag incluster:
//
//	go test -tags incluster -run InCluster ./deploy/
//
// docs/reconcile.md says what it proves and what it does not.

package deploy_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simfleet"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

// serviceAccountDir is where client-go's rest.InClusterConfig reads a
// pod's token, CA and namespace (the kubelet mounts them there).
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// The paths deploy/'s drift CronJob mounts, and what stands for each here.
const (
	podInventoryDir = "/etc/devata/inventory"
	// where Talos' Secret for the job's talos.dev ServiceAccount is mounted
	podTalosDir   = "/var/run/secrets/talos.dev"
	podReportsDir = "/reports"
)

// The checks whose results come from the Kubernetes API: they are what the
// service account's RBAC must allow.
var kubernetesChecks = []string{"kubelet", "cilium-declaration", "cilium-agent", "cilium-services", "coredns"}

// podBed is what both in-cluster runs share: a real kube-apiserver where
// the simulated fleet's kubelets registered their Nodes and the Kubernetes
// side of Cilium runs, deploy/'s Namespace, ServiceAccount and RBAC applied
// as kustomize renders them, and the devata binary.
type podBed struct {
	bin             string
	invDir, invPath string
	// talosDirs: each job's Talos identity as Talos' controller (the sim's
	// kubeaccess) wrote it for its talos.dev ServiceAccount, a directory
	// holding `config`, by account name.
	talosDirs map[string]string
	inv       *inventory.Inventory
	admin     *rest.Config
	built     resmap.ResMap
	fleet     *simfleet.Fleet
}

// devata runs in-cluster as deploy/'s drift CronJob and reconcile
// Deployment run it: their containers' args and env (paths mapped to files
// here), no kubeconfig, and the credentials a pod gets:
// KUBERNETES_SERVICE_HOST/PORT and a TokenRequest token for its
// ServiceAccount with the cluster CA and the namespace, at
// /var/run/secrets/kubernetes.io/serviceaccount in a private mount
// namespace (docs/reconcile.md#what-the-in-cluster-test-proves).
func TestInCluster(t *testing.T) {
	if out, err := exec.Command("unshare", "-m", "--propagation", "private", "true").CombinedOutput(); err != nil {
		t.Fatalf("this test runs devata in a private mount namespace (unshare -m) and needs root or CAP_SYS_ADMIN, and unshare from util-linux: %v %s", err, bytes.TrimSpace(out))
	}
	b := newPodBed(t)
	t.Run("DriftCronJob", func(t *testing.T) { testDriftCronJob(t, b) })
	t.Run("ReconcileDeployment", func(t *testing.T) { testReconcileDeployment(t, b) })
	t.Run("BackupCronJob", func(t *testing.T) { testBackupCronJob(t, b) })
	t.Run("LeastPrivilege", func(t *testing.T) { testLeastPrivilege(t, b) })
}

func newPodBed(t *testing.T) *podBed {
	t.Helper()
	ctx := t.Context()
	b := &podBed{bin: buildDevata(t)}

	// The homelab, each machine on a loopback address of its own (the pods
	// have no dial overrides: devata reaches the inventory's addresses).
	b.invDir = t.TempDir()
	var err error
	if b.invPath, err = examples.WriteHomelab(b.invDir); err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	loopback := fmt.Sprintf("127.%d.%d.", 150+pid%100, pid/100%250)
	data, err := os.ReadFile(b.invPath)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.ReplaceAll(data, []byte("address: 10.20.0."), []byte("address: "+loopback))
	if err := os.WriteFile(b.invPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// deploy's control-plane patch: the homelab's, plus the
	// kubernetesTalosAPIAccess that gives the jobs their Talos identities.
	cpPatch, err := os.ReadFile("inventory/controlplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.invDir, "patches", "controlplane.yaml"), cpPatch, 0o600); err != nil {
		t.Fatal(err)
	}
	secrets, err := os.ReadFile(simtest.FixtureSecrets())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.invDir, "secrets.yaml"), secrets, 0o600); err != nil {
		t.Fatal(err)
	}
	if b.inv, err = inventory.Load(b.invPath); err != nil {
		t.Fatal(err)
	}
	bundle, err := render.LoadSecrets(filepath.Join(b.invDir, "secrets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := simfleet.Start(ctx, b.inv, bundle, simfleet.Options{
		InventoryAddresses: true, Bootstrap: true, Kubernetes: true, Cilium: true,
		Dir: t.TempDir(), RebootDelay: 50 * time.Millisecond, Progress: testWriter{t},
	})
	if err != nil {
		t.Fatalf("simulated fleet with kube-apiserver and Cilium: %v", err)
	}
	t.Cleanup(func() { fleet.Close() }) //nolint:errcheck // the test is over
	b.admin, b.fleet = fleet.Kubernetes.Config, fleet
	// What machined runs on a control plane whose config enables
	// kubernetesTalosAPIAccess: the talos.dev CRD and its controller.
	kubeAccessCtx, stopKubeAccess := context.WithCancel(context.Background())
	kubeAccessDone := make(chan struct{})
	go func() {
		defer close(kubeAccessDone)
		fleet.RunKubeAccess(kubeAccessCtx, b.admin, bundle.Certs.OS, 200*time.Millisecond, func(err error) { t.Logf("kubeaccess: %v", err) }) //nolint:errcheck // only a client config error, seen below as no Secret
	}()
	t.Cleanup(func() { stopKubeAccess(); <-kubeAccessDone })

	// Nothing but the pod's credentials can reach the API server: no
	// KUBECONFIG, an empty HOME, and no kubeconfig next to the inventory
	// (devata bootstrap writes one there).
	if _, err := os.Stat(filepath.Join(b.invDir, "kubeconfig")); !os.IsNotExist(err) {
		t.Fatalf("a kubeconfig next to the inventory would be used instead of the pod's credentials: %v", err)
	}

	// deploy/ as kubectl apply -k renders it: the ServiceAccount, its
	// namespace and RBAC are applied; the workloads are what is run.
	if b.built, err = krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "."); err != nil {
		t.Fatalf("kustomize build deploy/: %v", err)
	}
	applied := 0
	var talosSAs []*resource.Resource
	for _, r := range b.built.Resources() {
		switch r.GetKind() {
		case "Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
			"Lease", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if r.GetApiVersion() == "talos.dev/v1alpha1" {
				talosSAs = append(talosSAs, r) // once Talos' CRD is served
				continue
			}
			apply(t, b.admin, r)
			applied++
		}
	}
	if applied < 12 || len(talosSAs) != 3 {
		t.Fatalf("deploy/ has too little RBAC: %d objects applied, %d talos.dev ServiceAccounts", applied, len(talosSAs))
	}
	b.talosDirs = map[string]string{}
	for _, r := range talosSAs {
		applyWhenServed(t, b.admin, r)
	}
	for _, r := range talosSAs {
		dir := t.TempDir()
		sec := talosSecret(t, b.admin, r.GetNamespace(), r.GetName())
		if err := os.WriteFile(filepath.Join(dir, "config"), sec.Data["config"], 0o400); err != nil {
			t.Fatal(err)
		}
		b.talosDirs[r.GetName()] = dir
	}
	return b
}

// workload is a Deployment's or CronJob's pod as this test runs it.
type workload struct {
	namespace, serviceAccount string
	args, env                 []string
	// noToken: the pod mounts no ServiceAccount token
	// (automountServiceAccountToken: false)
	noToken bool
}

// workloadOf reads the pod of deploy/'s kind/name: its ServiceAccount and
// its one container's args and env, the pod's paths mapped by dirs (an
// argument naming another absolute path fails the test) and env from
// fieldRefs filled in as the kubelet would for a pod named podName.
func (b *podBed) workloadOf(t *testing.T, kind, name, podName string, dirs map[string]string) workload {
	t.Helper()
	var r *resource.Resource
	for _, x := range b.built.Resources() {
		if x.GetKind() == kind && x.GetName() == name {
			r = x
		}
	}
	if r == nil {
		t.Fatalf("deploy/ has no %s %s", kind, name)
	}
	path := "spec.template.spec"
	if kind == "CronJob" {
		path = "spec.jobTemplate.spec.template.spec"
	}
	podSpec := field[map[string]any](t, r, path)
	w := workload{namespace: r.GetNamespace()}
	w.serviceAccount, _ = podSpec["serviceAccountName"].(string)
	automount, set := podSpec["automountServiceAccountToken"]
	if sa := findV1SA(b.built, w.serviceAccount); !set && sa != nil {
		automount, _ = sa.GetFieldValue("automountServiceAccountToken")
	}
	w.noToken = automount == false
	containers := asSlice(podSpec["containers"])
	if w.serviceAccount == "" || len(containers) != 1 {
		t.Fatalf("%s %s: serviceAccountName %q, %d containers; want one devata container under a ServiceAccount", kind, name, w.serviceAccount, len(containers))
	}
	container, _ := containers[0].(map[string]any)
	mapPath := pathMapper(t, dirs)
	for _, a := range asSlice(container["args"]) {
		w.args = append(w.args, mapPath(a.(string)))
	}
	if slices.ContainsFunc(w.args, func(a string) bool { return strings.HasPrefix(a, "--kubeconfig") }) {
		t.Fatalf("%s %s passes --kubeconfig: %q", kind, name, w.args)
	}
	for _, e := range asSlice(container["env"]) {
		e := e.(map[string]any)
		n := e["name"].(string)
		if v, ok := e["value"].(string); ok {
			if here, ok := dirs[v]; ok { // a directory of the pod's (TMPDIR)
				v = here
			}
			for pod, here := range dirs { // a file on one (DEVATA_AGE_IDENTITY)
				if strings.HasPrefix(v, pod+"/") {
					v = here + strings.TrimPrefix(v, pod)
				}
			}
			w.env = append(w.env, n+"="+v)
			continue
		}
		if ref, ok := e["valueFrom"].(map[string]any)["secretKeyRef"].(map[string]any); ok {
			// as the kubelet does: the key of the Secret in the pod's
			// namespace; a missing optional key leaves the variable out
			sec, err := kubernetes.NewForConfigOrDie(b.admin).CoreV1().Secrets(w.namespace).Get(t.Context(), ref["name"].(string), metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s %s: env %s from Secret %v: %v", kind, name, n, ref["name"], err)
			}
			v, ok := sec.Data[ref["key"].(string)]
			switch {
			case ok:
				w.env = append(w.env, n+"="+string(v))
			case ref["optional"] != true:
				t.Fatalf("%s %s: env %s: Secret %v has no key %v and it is not optional: the pod would not start", kind, name, n, ref["name"], ref["key"])
			}
			continue
		}
		if ref, ok := e["valueFrom"].(map[string]any)["configMapKeyRef"].(map[string]any); ok {
			// as the kubelet does, for a ConfigMap in the pod's namespace
			cm, err := kubernetes.NewForConfigOrDie(b.admin).CoreV1().ConfigMaps(w.namespace).Get(t.Context(), ref["name"].(string), metav1.GetOptions{})
			if err != nil && ref["optional"] != true {
				t.Fatalf("%s %s: env %s from ConfigMap %v: %v: the pod would not start", kind, name, n, ref["name"], err)
			}
			v, ok := "", false
			if cm != nil {
				v, ok = cm.Data[ref["key"].(string)]
			}
			switch {
			case ok:
				w.env = append(w.env, n+"="+v)
			case ref["optional"] != true:
				t.Fatalf("%s %s: env %s: ConfigMap %v has no key %v and it is not optional: the pod would not start", kind, name, n, ref["name"], ref["key"])
			}
			continue
		}
		ref, _ := e["valueFrom"].(map[string]any)["fieldRef"].(map[string]any)
		switch ref["fieldPath"] {
		case "metadata.name":
			w.env = append(w.env, n+"="+podName)
		case "metadata.namespace":
			w.env = append(w.env, n+"="+w.namespace)
		default:
			t.Fatalf("%s %s: env %s comes from %v, which this test does not fill in: add it", kind, name, n, e["valueFrom"])
		}
	}
	shown := make([]string, len(w.env))
	for i, e := range w.env {
		shown[i] = e
		if strings.HasPrefix(e, "AWS_SECRET_ACCESS_KEY=") {
			shown[i] = "AWS_SECRET_ACCESS_KEY=(redacted)"
		}
	}
	t.Logf("%s %s's container as run here: args %q, env %q", kind, name, w.args, shown)
	return w
}

// command is devata run as w's pod would run it, with a fresh token of
// serviceAccount (w's unless given) mounted where client-go's
// rest.InClusterConfig reads it, in a private mount namespace.
func (b *podBed) command(t *testing.T, w workload, serviceAccount string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	if serviceAccount == "" {
		serviceAccount = w.serviceAccount
	}
	saDir := ""
	if !w.noToken {
		saDir = t.TempDir()
		tok, err := kubernetes.NewForConfigOrDie(b.admin).CoreV1().ServiceAccounts(w.namespace).CreateToken(t.Context(), serviceAccount, &authv1.TokenRequest{
			Spec: authv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest for ServiceAccount %s/%s: %v", w.namespace, serviceAccount, err)
		}
		for name, data := range map[string][]byte{"token": []byte(tok.Status.Token), "ca.crt": b.admin.CAData, "namespace": []byte(w.namespace)} {
			if err := os.WriteFile(filepath.Join(saDir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	host, port := splitHost(t, b.admin.Host)
	home := t.TempDir()
	// A tmpfs over /var/run (only in the new namespace) holds the mount
	// point, so that nothing is created on the host; exec keeps devata
	// the process that signals reach.
	script := `set -e
run=$(readlink -f /var/run)
mount -t tmpfs -o mode=0755,size=1m devata-incluster "$run"
if [ -n "$SA_DIR" ]; then
	mkdir -p "$run/secrets/kubernetes.io/serviceaccount"
	mount --bind -o ro "$SA_DIR" "` + serviceAccountDir + `"
fi
exec "$@"`
	cmd := exec.CommandContext(t.Context(), "unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", script, "sh", b.bin}, w.args...)...)
	cmd.Env = append([]string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"SA_DIR=" + saDir, "KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port,
	}, w.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// The drift CronJob: every Kubernetes-side check must be InSync, read from
// the Node and the agents (pods/exec): deploy's RBAC is enough. The same
// run with a ServiceAccount bound to nothing must get each of them
// Unknown, forbidden: the assertion can fail.
func testDriftCronJob(t *testing.T, b *podBed) {
	reports := t.TempDir()
	w := b.workloadOf(t, "CronJob", "devata-drift", "devata-drift-29000000-x7k2p", map[string]string{
		podInventoryDir: b.invDir,
		podTalosDir:     b.talosDirs["devata-drift"],
		podReportsDir:   reports,
	})
	if !slices.Contains(w.args, "--talosconfig="+filepath.Join(b.talosDirs["devata-drift"], "config")) || !slices.Contains(w.args, "--inventory="+b.invPath) {
		t.Fatalf("the CronJob's args %q do not name the inventory and talosconfig under %s and %s", w.args, podInventoryDir, podTalosDir)
	}
	run := func(serviceAccount string, w workload) (string, map[string][]junitCase) {
		for _, f := range []string{"drift.xml", "devata_drift.prom"} {
			os.Remove(filepath.Join(reports, f))
		}
		cmd, stdout, stderr := b.command(t, w, serviceAccount)
		err := cmd.Run()
		out := fmt.Sprintf("exit %d (%v)\n--- stdout\n%s--- stderr\n%s", cmd.ProcessState.ExitCode(), err, stdout.String(), stderr.String())
		if strings.Contains(stderr.String(), "unshare:") || strings.Contains(stderr.String(), "mount:") {
			t.Fatalf("setting up the pod's mount namespace failed:\n%s", out)
		}
		xmlData, err := os.ReadFile(filepath.Join(reports, "drift.xml"))
		if err != nil {
			t.Fatalf("the CronJob's --junit-file was not written: %v\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(reports, "devata_drift.prom")); err != nil {
			t.Errorf("the CronJob's --prom-file was not written: %v", err)
		}
		return out, byCheck(t, xmlData)
	}

	// deploy's ServiceAccount: every Kubernetes-side check is InSync, from
	// the Node and the agent, on every machine.
	out, cases := run("", w)
	for _, check := range kubernetesChecks {
		got, want := cases[check], len(b.inv.Machines)
		if check == "coredns" { // the cluster's DNS, reported on each control plane
			want = len(b.inv.ControlPlanes())
		}
		if len(got) != want {
			t.Errorf("%s: %d results, want %d\n%s", check, len(got), want, out)
		}
		for _, c := range got {
			if c.Failure != nil || c.Error != nil {
				t.Errorf("%s on %s is not InSync with deploy/'s RBAC: %s\n%s", check, c.Classname, c.problem(), out)
			}
		}
	}
	for _, c := range cases["kubelet"] {
		if c.SystemOut == nil || !strings.Contains(c.SystemOut.Text, "Node "+c.Classname+" Ready=true kubelet ") {
			t.Errorf("kubelet on %s does not report from its Node: %+v", c.Classname, c.SystemOut)
		}
	}
	for _, c := range cases["cilium-agent"] {
		if c.SystemOut == nil || !strings.Contains(c.SystemOut.Text, "cilium-dbg status") {
			t.Errorf("cilium-agent on %s does not report from the agent (cilium-dbg status over pods/exec): %+v", c.Classname, c.SystemOut)
		}
	}
	// The Talos side, with the identity Talos wrote for the talos.dev
	// ServiceAccount devata-drift: os:admin, so the config check reads
	// every MachineConfig.
	for _, c := range cases["config"] {
		if c.Failure != nil || c.Error != nil {
			t.Errorf("config on %s is not InSync with devata-drift's Talos identity: %s", c.Classname, c.problem())
		}
	}
	if len(cases["config"]) != len(b.inv.Machines) {
		t.Errorf("config: %d results, want %d\n%s", len(cases["config"]), len(b.inv.Machines), out)
	}
	if !strings.HasPrefix(out, "exit 0 ") {
		t.Errorf("a healthy fleet with deploy/'s RBAC: want exit 0\n%s", out)
	}

	// With the backup's Talos identity (os:etcd:backup) instead, Talos
	// refuses the reads: the config check is Unknown, not authorized.
	weak := w
	weak.args = slices.Clone(w.args)
	for i, a := range weak.args {
		if strings.HasPrefix(a, "--talosconfig=") {
			weak.args[i] = "--talosconfig=" + filepath.Join(b.talosDirs["devata-etcd-backup"], "config")
		}
	}
	out, cases = run("", weak)
	for _, c := range cases["config"] {
		if c.Error == nil {
			t.Errorf("config on %s with an os:etcd:backup identity: %s, want Unknown", c.Classname, c.problem())
		}
	}
	if len(cases["config"]) != len(b.inv.Machines) || !strings.HasPrefix(out, "exit 2 ") {
		t.Errorf("drift with an os:etcd:backup identity: want every config Unknown and exit 2\n%s", out)
	}

	// A ServiceAccount bound to nothing: the same checks are Unknown, and
	// the API server names who it refused: the pod's ServiceAccount, so the
	// credentials were the mounted token's (rest.InClusterConfig).
	if _, err := kubernetes.NewForConfigOrDie(b.admin).CoreV1().ServiceAccounts(w.namespace).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "devata-unbound"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, cases = run("devata-unbound", w)
	user := "system:serviceaccount:" + w.namespace + ":devata-unbound"
	for _, check := range kubernetesChecks {
		for _, c := range cases[check] {
			if c.Error == nil || !strings.Contains(c.Error.Text, "is forbidden: User \""+user+"\"") {
				t.Errorf("%s on %s without RBAC: %s, want Unknown, forbidden to %s", check, c.Classname, c.problem(), user)
			}
		}
	}
	if !strings.HasPrefix(out, "exit 2 ") {
		t.Errorf("without RBAC: want exit 2\n%s", out)
	}

	// Every grant is needed: the drift account less any one rule-verb of
	// what deploy/ gives it (jobCalls, which leastpriv_test.go holds
	// deploy/'s RBAC to) gets some Kubernetes-side check off InSync.
	everyGrantNeeded(t, b, func(sa string) map[string][]junitCase { _, c := run(sa, w); return c })
}

// The reconcile Deployment's pod: it takes the Lease as its ServiceAccount
// (deploy's leader-election Role), passes with every Kubernetes-side check
// InSync in its /metrics, and on SIGTERM releases the Lease and exits 0.
func testReconcileDeployment(t *testing.T, b *podBed) {
	const podName = "devata-reconcile-6d4cf56db6-q2x8n"
	w := b.workloadOf(t, "Deployment", "devata-reconcile", podName, map[string]string{
		podInventoryDir:   b.invDir,
		podTalosDir:       b.talosDirs["devata-reconcile"],
		"/var/log/devata": t.TempDir(),
	})
	// The pod's metrics port, :9090, may be taken on this machine: a free one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()
	lease := ""
	for i, a := range w.args {
		switch {
		case strings.HasPrefix(a, "--metrics-addr="):
			w.args[i] = "--metrics-addr=" + metricsAddr
		case strings.HasPrefix(a, "--lease-name="):
			lease = strings.TrimPrefix(a, "--lease-name=")
		}
	}
	if lease == "" || !slices.Contains(w.args, "--leader-elect") || !slices.Contains(w.args, "--metrics-addr="+metricsAddr) {
		t.Fatalf("the Deployment's args %q lack --leader-elect, --lease-name or --metrics-addr", w.args)
	}
	t.Logf("metrics on %s instead of the pod's :9090", metricsAddr)
	cmd, stdout, stderr := b.command(t, w, "")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	output := func() string { return "--- stdout\n" + stdout.String() + "--- stderr\n" + stderr.String() }
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill() //nolint:errcheck // the test failed: stop it
			if err := <-exited; err != nil {
				t.Logf("devata, stopped: %v", err)
			}
		}
	}()

	kube := kubernetes.NewForConfigOrDie(b.admin)
	var missing []string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case err := <-exited:
			t.Fatalf("devata reconcile exited before its first pass: %v\n%s", err, output())
		case <-time.After(500 * time.Millisecond):
		}
		missing = passSeen(b, metricsAddr, kube, w.namespace, lease, podName)
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes the reconcile pod has not: %s\n%s", strings.Join(missing, "; "), output())
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("devata reconcile after SIGTERM: %v, want exit 0\n%s", err, output())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("devata reconcile did not exit within 90 s of SIGTERM\n%s", output())
	}
	l, err := kube.CoordinationV1().Leases(w.namespace).Get(t.Context(), lease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Lease %s/%s: %v", w.namespace, lease, err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("Lease %s/%s still held by %q after SIGTERM: it must be released for a standby to take over", w.namespace, lease, *h)
	}
}

// passSeen says what is still missing of a reconcile pod that leads and
// has passed: the Lease held in its name, devata_reconcile_leader 1, a pass
// ok, and every Kubernetes-side check InSync on every machine in
// devata_drift_status; nil when nothing is.
func passSeen(b *podBed, addr string, kube kubernetes.Interface, ns, lease, podName string) []string {
	var missing []string
	l, err := kube.CoordinationV1().Leases(ns).Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != podName {
		missing = append(missing, fmt.Sprintf("held the Lease %s/%s (%v)", ns, lease, err))
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return append(missing, "served /metrics: "+err.Error())
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return append(missing, "served parseable /metrics: "+err.Error())
	}
	gauge := func(name string, labels map[string]string) float64 {
		total := 0.0
		f := families[name]
		if f == nil {
			return 0
		}
	metric:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metric
				}
			}
			switch {
			case m.GetGauge() != nil:
				total += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				total += m.GetCounter().GetValue()
			}
		}
		return total
	}
	if gauge("devata_reconcile_leader", nil) != 1 {
		missing = append(missing, "devata_reconcile_leader 1")
	}
	if gauge("devata_reconcile_passes_total", map[string]string{"result": "ok"}) < 1 {
		missing = append(missing, `devata_reconcile_passes_total{result="ok"} ≥ 1`)
	}
	for _, check := range kubernetesChecks {
		for _, m := range b.inv.Machines {
			if check == "coredns" && !m.IsControlPlane() { // the cluster's DNS, reported on each control plane
				continue
			}
			if gauge("devata_drift_status", map[string]string{"check": check, "machine": m.Name, "status": "InSync"}) != 1 {
				missing = append(missing, fmt.Sprintf(`devata_drift_status{check=%q,machine=%q,status="InSync"} 1`, check, m.Name))
			}
		}
	}
	return missing
}

// buildDevata builds the devata binary, with the test's own build
// settings so that the build cache serves it (the image's -trimpath,
// CGO_ENABLED=0 build is internal/image's to test).
func buildDevata(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "devata")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "devata.dev/devata/cmd/devata")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build devata: %v\n%s", err, out)
	}
	return bin
}

// apply creates one object of the kustomize build as kubectl apply would
// for a new object, through the dynamic client.
func apply(t *testing.T, cfg *rest.Config, r *resource.Resource) {
	t.Helper()
	if err := applyErr(t.Context(), cfg, r); err != nil {
		t.Fatal(err)
	}
}

func applyErr(ctx context.Context, cfg *rest.Config, r *resource.Resource) error {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kubernetes.NewForConfigOrDie(cfg).Discovery()))
	m, err := r.Map()
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	gvk := u.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s %s: %w", gvk, u.GetName(), err)
	}
	var client dynamic.ResourceInterface = dc.Resource(mapping.Resource)
	if u.GetNamespace() != "" {
		client = dc.Resource(mapping.Resource).Namespace(u.GetNamespace())
	}
	if _, err := client.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// applyWhenServed applies r once the API server serves its kind: the
// talos.dev CRD, which Talos installs when a control plane's config
// enables kubernetesTalosAPIAccess.
func applyWhenServed(t *testing.T, cfg *rest.Config, r *resource.Resource) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := applyErr(t.Context(), cfg, r)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %v (does a control plane's config enable kubernetesTalosAPIAccess?)", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// talosSecret waits for the Secret Talos' controller writes for the
// talos.dev ServiceAccount ns/name, and fails with its failureReason if
// it has one instead.
func talosSecret(t *testing.T, cfg *rest.Config, ns, name string) *corev1.Secret {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(cfg)
	dc := dynamic.NewForConfigOrDie(cfg)
	gvr := schema.GroupVersionResource{Group: "talos.dev", Version: "v1alpha1", Resource: "serviceaccounts"}
	deadline := time.Now().Add(time.Minute)
	for {
		sec, err := kube.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err == nil && len(sec.Data["config"]) > 0 {
			return sec
		}
		if time.Now().After(deadline) {
			reason := ""
			if u, gerr := dc.Resource(gvr).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{}); gerr == nil {
				reason, _, _ = unstructured.NestedString(u.Object, "status", "failureReason")
			}
			t.Fatalf("no Secret %s/%s with a talosconfig from Talos after a minute (%v); the talos.dev ServiceAccount's failureReason: %q", ns, name, err, reason)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// pathMapper maps the pod's paths in an argument to the test's; an
// argument naming another absolute path fails the test, so that a new
// mount in the CronJob is noticed here.
func pathMapper(t *testing.T, dirs map[string]string) func(string) string {
	return func(arg string) string {
		name, value, ok := strings.Cut(arg, "=")
		if !ok || !strings.HasPrefix(value, "/") {
			return arg
		}
		for pod, here := range dirs {
			if value == pod || strings.HasPrefix(value, pod+"/") {
				return name + "=" + here + strings.TrimPrefix(value, pod)
			}
		}
		t.Fatalf("the CronJob's argument %q names a path this test does not provide: map it", arg)
		return ""
	}
}

func splitHost(t *testing.T, rawURL string) (string, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatalf("API server %s: %v", rawURL, err)
	}
	return host, port
}

// The JUnit the CronJob writes (--junit-file): a testcase per result.
type junitCase struct {
	Name      string       `xml:"name,attr"`
	Classname string       `xml:"classname,attr"`
	Failure   *junitBody   `xml:"failure"`
	Error     *junitBody   `xml:"error"`
	SystemOut *junitBodyCD `xml:"system-out"`
}

type junitBody struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

type junitBodyCD struct {
	Text string `xml:",chardata"`
}

func (c junitCase) problem() string {
	switch {
	case c.Failure != nil:
		return "Drifted: " + c.Failure.Message
	case c.Error != nil:
		return "Unknown: " + c.Error.Message
	}
	return "InSync"
}

// byCheck reads the JUnit report's testcases by check.
func byCheck(t *testing.T, data []byte) map[string][]junitCase {
	t.Helper()
	var doc struct {
		Suites []struct {
			Cases []junitCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("the CronJob's JUnit report: %v\n%s", err, data)
	}
	out := map[string][]junitCase{}
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			out[c.Name] = append(out[c.Name], c)
		}
	}
	return out
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
