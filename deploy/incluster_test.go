//go:build incluster

// The in-cluster test: devata run as deploy/'s drift CronJob runs it, with
// a pod's credentials and nothing else. It needs root (mount namespaces)
// and unshare from util-linux, so it sits behind the build tag incluster:
//
//	go test -tags incluster -run InCluster ./deploy/
//
// docs/reconcile.md says what it proves and what it does not.

package deploy_test

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simfleet"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
)

// serviceAccountDir is where client-go's rest.InClusterConfig reads a
// pod's token, CA and namespace (the kubelet mounts them there).
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// The paths deploy/'s drift CronJob mounts, and what stands for each here.
const (
	podInventoryDir = "/etc/devata/inventory"
	podTalosDir     = "/etc/devata/talos"
	podReportsDir   = "/reports"
)

// The checks whose results come from the Kubernetes API: they are what the
// service account's RBAC must allow.
var kubernetesChecks = []string{"kubelet", "cilium-declaration", "cilium-agent", "cilium-services"}

// devata runs in-cluster exactly as deploy/cronjob.yaml's container runs
// it: its args and env (paths mapped to files here), no kubeconfig, and
// the credentials a pod of the CronJob gets: KUBERNETES_SERVICE_HOST/PORT
// and a TokenRequest token for its ServiceAccount with the cluster CA and
// the namespace, at /var/run/secrets/kubernetes.io/serviceaccount in a
// private mount namespace. The ServiceAccount and RBAC are deploy/'s own,
// rendered by kustomize and applied to a real kube-apiserver, where the
// simulated fleet's kubelets registered their Nodes and the Kubernetes side
// of Cilium runs. Every Kubernetes-side check must be InSync, read from the
// Node and the agents (pods/exec): deploy's RBAC is enough. The same run
// with a ServiceAccount bound to nothing must get each of them Unknown,
// forbidden: the assertion can fail.
func TestInClusterDriftCronJob(t *testing.T) {
	if out, err := exec.Command("unshare", "-m", "--propagation", "private", "true").CombinedOutput(); err != nil {
		t.Fatalf("this test runs devata in a private mount namespace (unshare -m) and needs root or CAP_SYS_ADMIN, and unshare from util-linux: %v %s", err, bytes.TrimSpace(out))
	}
	ctx := t.Context()
	built := buildDevata(t)

	// The homelab, each machine on a loopback address of its own (the
	// CronJob has no dial overrides: devata reaches the inventory's addresses).
	invDir := t.TempDir()
	invPath, err := examples.WriteHomelab(invDir)
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	loopback := fmt.Sprintf("127.%d.%d.", 150+pid%100, pid/100%250)
	data, err := os.ReadFile(invPath)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.ReplaceAll(data, []byte("address: 10.20.0."), []byte("address: "+loopback))
	if err := os.WriteFile(invPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	secrets, err := os.ReadFile(simtest.FixtureSecrets())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(invDir, "secrets.yaml"), secrets, 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Load(invPath)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := bootstrap.LoadSecrets(filepath.Join(invDir, "secrets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := simfleet.Start(ctx, inv, bundle, simfleet.Options{
		InventoryAddresses: true, Bootstrap: true, Kubernetes: true, Cilium: true,
		Dir: t.TempDir(), RebootDelay: 50 * time.Millisecond, Progress: testWriter{t},
	})
	if err != nil {
		t.Fatalf("simulated fleet with kube-apiserver and Cilium: %v", err)
	}
	t.Cleanup(func() { fleet.Close() }) //nolint:errcheck // the test is over
	admin := fleet.Kubernetes.Config

	// deploy/ as kubectl apply -k renders it: the ServiceAccount, its
	// namespace and RBAC are applied; the CronJob is what is run below.
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build deploy/: %v", err)
	}
	var cronJob *resource.Resource
	applied := 0
	for _, r := range res.Resources() {
		switch r.GetKind() {
		case "Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
			apply(t, admin, r)
			applied++
		case "CronJob":
			if r.GetName() == "devata-drift" {
				cronJob = r
			}
		}
	}
	if cronJob == nil || applied < 8 {
		t.Fatalf("deploy/ has no CronJob devata-drift or too little RBAC (%d objects applied)", applied)
	}
	podSpec := field[map[string]any](t, cronJob, "spec.jobTemplate.spec.template.spec")
	saName, _ := podSpec["serviceAccountName"].(string)
	containers, _ := podSpec["containers"].([]any)
	if saName == "" || len(containers) != 1 {
		t.Fatalf("CronJob devata-drift: serviceAccountName %q, %d containers; want one devata container under a ServiceAccount", saName, len(containers))
	}
	container, _ := containers[0].(map[string]any)

	reports := t.TempDir()
	mapPath := pathMapper(t, map[string]string{
		podInventoryDir: invDir,
		podTalosDir:     filepath.Dir(fleet.Talosconfig),
		podReportsDir:   reports,
	})
	var args []string
	for _, a := range container["args"].([]any) {
		args = append(args, mapPath(a.(string)))
	}
	// the container's own env, as the pod has it (DEVATA_AGE_IDENTITY names
	// a file of the optional Secret: absent here, and the bundle is clear)
	var env []string
	for _, e := range asSlice(container["env"]) {
		e := e.(map[string]any)
		if v, ok := e["value"].(string); ok {
			env = append(env, e["name"].(string)+"="+v)
		}
	}
	t.Logf("the CronJob's container: args %q, env %q", args, env)
	if !slices.Contains(args, "--talosconfig="+fleet.Talosconfig) || !slices.Contains(args, "--inventory="+invPath) {
		t.Fatalf("the CronJob's args %q do not name the inventory and talosconfig under %s and %s", args, podInventoryDir, podTalosDir)
	}

	// Nothing but the pod's credentials can reach the API server: no
	// KUBECONFIG, no --kubeconfig in the args, an empty HOME, and no
	// kubeconfig next to the inventory (devata bootstrap writes one there).
	if _, err := os.Stat(filepath.Join(invDir, "kubeconfig")); !os.IsNotExist(err) {
		t.Fatalf("a kubeconfig next to the inventory would be used instead of the pod's credentials: %v", err)
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--kubeconfig") }) {
		t.Fatalf("the CronJob passes --kubeconfig: %q", args)
	}
	ns := cronJob.GetNamespace()
	host, port := splitHost(t, admin.Host)
	run := func(serviceAccount string) (string, map[string][]junitCase) {
		saDir := t.TempDir()
		kube := kubernetes.NewForConfigOrDie(admin)
		tok, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, serviceAccount, &authv1.TokenRequest{
			Spec: authv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest for ServiceAccount %s/%s: %v", ns, serviceAccount, err)
		}
		for name, data := range map[string][]byte{"token": []byte(tok.Status.Token), "ca.crt": admin.CAData, "namespace": []byte(ns)} {
			if err := os.WriteFile(filepath.Join(saDir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{"drift.xml", "devata_drift.prom"} {
			os.Remove(filepath.Join(reports, f))
		}
		home := t.TempDir()
		// A tmpfs over /var/run (only in the new namespace) holds the
		// mount point, so that nothing is created on the host.
		script := `set -e
run=$(readlink -f /var/run)
mount -t tmpfs -o mode=0755,size=1m devata-incluster "$run"
mkdir -p "$run/secrets/kubernetes.io/serviceaccount"
mount --bind -o ro "$SA_DIR" "` + serviceAccountDir + `"
exec "$@"`
		cmd := exec.CommandContext(ctx, "unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", script, "sh", built}, args...)...)
		cmd.Env = append([]string{
			"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
			"SA_DIR=" + saDir, "KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port,
		}, env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
		code := cmd.ProcessState.ExitCode()
		out := fmt.Sprintf("exit %d (%v)\n--- stdout\n%s--- stderr\n%s", code, err, stdout.String(), stderr.String())
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
	out, cases := run(saName)
	for _, check := range kubernetesChecks {
		got := cases[check]
		if len(got) != len(inv.Machines) {
			t.Errorf("%s: %d results, want one per machine (%d)\n%s", check, len(got), len(inv.Machines), out)
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
	if !strings.HasPrefix(out, "exit 0 ") {
		t.Errorf("a healthy fleet with deploy/'s RBAC: want exit 0\n%s", out)
	}

	// A ServiceAccount bound to nothing: the same checks are Unknown, and
	// the reason says the API server forbade the read.
	kube := kubernetes.NewForConfigOrDie(admin)
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "devata-unbound"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, cases = run("devata-unbound")
	// The API server names who it refused: the pod's ServiceAccount, so
	// the credentials were the mounted token's (rest.InClusterConfig).
	user := "system:serviceaccount:" + ns + ":devata-unbound"
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
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kubernetes.NewForConfigOrDie(cfg).Discovery()))
	m, err := r.Map()
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	gvk := u.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s %s: %v", gvk, u.GetName(), err)
	}
	var client dynamic.ResourceInterface = dc.Resource(mapping.Resource)
	if u.GetNamespace() != "" {
		client = dc.Resource(mapping.Resource).Namespace(u.GetNamespace())
	}
	if _, err := client.Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("apply %s %s/%s: %v", gvk.Kind, u.GetNamespace(), u.GetName(), err)
	}
}

// field reads a field of a built resource.
func field[T any](t *testing.T, r *resource.Resource, path string) T {
	t.Helper()
	v, err := r.GetFieldValue(path)
	if err != nil {
		t.Fatalf("%s/%s: %s: %v", r.GetKind(), r.GetName(), path, err)
	}
	out, ok := v.(T)
	if !ok {
		t.Fatalf("%s/%s: %s is %T", r.GetKind(), r.GetName(), path, v)
	}
	return out
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

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
