//go:build incluster

package deploy_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	stdx509 "crypto/x509"

	"filippo.io/age"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	authv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/netcheck"
	"devata.dev/devata/sim"
)

// The etcd backup and verify CronJobs against a real S3 server
// (versitygw): no Kubernetes token, no secrets bundle, the os:etcd:backup
// identity Talos wrote for the backup's talos.dev ServiceAccount (none for
// verify), and the S3 credentials of the Secret devata-backup-s3 as the
// kubelet hands them over. The backup's one scheduled run uploads a
// snapshot and its sidecar to deploy/'s bucket and prefix, proves it
// restores and prunes; the verify job proves the newest again; both
// record their metrics in the one textfile, the verify keeping the
// backup's last success, and a real node_exporter's textfile collector
// over the reports volume serves them as the jobs recorded them.
func testBackupCronJob(t *testing.T, b *podBed) {
	srv := testenv.StartS3(t)
	kube := kubernetes.NewForConfigOrDie(b.admin)
	if _, err := kube.CoreV1().Secrets("devata").Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "devata-backup-s3"},
		// no AWS_REGION: an optional key the Secret may leave out
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey, "AWS_ENDPOINT_URL_S3": srv.Endpoint},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Encrypted at rest without a flag (the setting backup.encrypt-to from
	// the ConfigMap devata-backup): to the cluster's key, whose identity
	// the Secret devata-backup-age holds for the proofs, and an offline one.
	clusterKey, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	offlineKey, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ConfigMaps("devata").Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "devata-backup"},
		Data:       map[string]string{"encrypt-to": clusterKey.Recipient().String() + "," + offlineKey.Recipient().String()},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ageDir := t.TempDir() // the Secret devata-backup-age as the kubelet mounts it (0440, fsGroup)
	if err := os.WriteFile(filepath.Join(ageDir, "keys.txt"), []byte(clusterKey.String()+"\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	// What a real control plane streams: the database of an etcd that a
	// kube-apiserver wrote (the sim's own etcd holds no Kubernetes keys,
	// which backup verify looks for).
	snap := kubeEtcdSnapshot(t)
	for _, m := range b.fleet.Machines() {
		if strings.HasPrefix(m.Name(), "cp-") {
			m.SetFaults(sim.Faults{EtcdSnapshotData: snap})
			t.Cleanup(func() { m.SetFaults(sim.Faults{}) })
		}
	}

	reports, backupWork, verifyWork := t.TempDir(), t.TempDir(), t.TempDir()
	w := b.workloadOf(t, "CronJob", "devata-etcd-backup", "devata-etcd-backup-29000000-q8z4m", map[string]string{
		podInventoryDir:   b.invDir,
		podTalosDir:       b.talosDirs["devata-etcd-backup"],
		podReportsDir:     reports,
		"/work":           backupWork,
		"/etc/devata/age": ageDir,
	})
	if !w.noToken {
		t.Errorf("the backup pod mounts a Kubernetes token: it calls no Kubernetes API")
	}
	dest := ""
	for _, a := range w.args {
		if v, ok := strings.CutPrefix(a, "--to="); ok {
			dest = v
		}
	}
	bucket, prefix, _ := strings.Cut(strings.TrimPrefix(dest, "s3://"), "/")
	if err := srv.CreateBucket(t.Context(), bucket); err != nil {
		t.Fatal(err)
	}
	objects := func() []string {
		entries, _ := os.ReadDir(filepath.Join(srv.Dir, bucket, prefix))
		var names []string
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".") {
				names = append(names, e.Name())
			}
		}
		return names
	}
	run := func(w workload) string {
		t.Helper()
		cmd, stdout, stderr := b.command(t, w, "")
		err := cmd.Run()
		out := fmt.Sprintf("exit %d (%v)\n--- stdout\n%s--- stderr\n%s", cmd.ProcessState.ExitCode(), err, stdout.String(), stderr.String())
		if strings.Contains(out, srv.SecretKey) {
			t.Errorf("the S3 secret key is in the job's output")
		}
		if err != nil {
			t.Fatalf("the %s CronJob with its own identity failed:\n%s", w.serviceAccount, out)
		}
		return out
	}
	prom := filepath.Join(reports, "devata_backup.prom")
	// The reports volume as the textfile collector of the cluster's
	// node_exporter reads it (reports-pvc.yaml): what Prometheus gets.
	ne := testenv.StartNodeExporter(t, reports)
	metrics := func() map[string]float64 {
		t.Helper()
		f, err := os.Open(prom)
		if err != nil {
			t.Fatalf("the jobs' --prom-file: %v", err)
		}
		defer f.Close()
		parser := expfmt.NewTextParser(model.LegacyValidation)
		written, err := parser.TextToMetricFamilies(f)
		if err != nil {
			t.Fatal(err)
		}
		scraped, err := ne.Scrape(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if e := scraped["node_textfile_scrape_error"]; e == nil || e.GetMetric()[0].GetGauge().GetValue() != 0 {
			t.Errorf("node_exporter could not read the reports volume (node_textfile_scrape_error %v):\n%s", e, ne.Log())
		}
		values := func(fams map[string]*dto.MetricFamily) map[string]float64 {
			out := map[string]float64{}
			for name, fam := range fams {
				if !strings.HasPrefix(name, "devata_backup_") {
					continue // node_exporter's own series
				}
				for _, m := range fam.GetMetric() {
					labels := map[string]string{}
					for _, l := range m.GetLabel() {
						labels[l.GetName()] = l.GetValue()
					}
					if labels["cluster"] != b.inv.Cluster.Name || labels["destination"] != dest || len(fam.GetMetric()) != 1 {
						t.Errorf("%s: %s%v, want one series labelled cluster %s, destination %s", prom, name, labels, b.inv.Cluster.Name, dest)
					}
					out[name] = m.GetGauge().GetValue()
				}
			}
			return out
		}
		got := values(scraped)
		if want := values(written); !maps.Equal(got, want) || len(got) != 4 {
			t.Errorf("node_exporter serves %v; the jobs' file holds %v (want the four devata_backup_ series in both)", got, want)
		}
		return got
	}
	type sidecar struct {
		Time       time.Time `json:"time"`
		Size       int64     `json:"size"`
		Revision   int64     `json:"etcdRevision"`
		Encryption *struct {
			Recipients []string `json:"recipients"`
		} `json:"encryption"`
		Verified *struct {
			Time     time.Time `json:"time"`
			Result   string    `json:"result"`
			Revision int64     `json:"revision"`
		} `json:"verified"`
	}
	readSidecar := func(name string) sidecar {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(srv.Dir, bucket, prefix, name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var s sidecar
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	out := run(w)
	got := objects()
	if len(got) != 2 || !strings.HasSuffix(got[0], ".db") || got[1] != got[0]+".json" {
		t.Fatalf("the backup left %v at %s, want one snapshot and its sidecar\n%s", got, dest, out)
	}
	s := readSidecar(got[0])
	if s.Verified == nil || s.Verified.Result != "restored" || s.Verified.Revision != s.Revision || s.Revision == 0 {
		t.Errorf("the backup's sidecar %+v: want it proven (restored at its revision) by the same run\n%s", s, out)
	}
	if s.Encryption == nil || strings.Join(s.Encryption.Recipients, " ") != clusterKey.Recipient().String()+" "+offlineKey.Recipient().String() {
		t.Errorf("the backup's sidecar says encryption %+v, want age to the ConfigMap's two recipients", s.Encryption)
	}
	if stored, err := os.ReadFile(filepath.Join(srv.Dir, bucket, prefix, got[0])); err != nil || !bytes.HasPrefix(stored, []byte("age-encryption.org/v1\n")) || bytes.Contains(stored, snap[:4096]) {
		t.Errorf("the stored snapshot is not age ciphertext (%v)", err)
	}
	if entries, _ := os.ReadDir(backupWork); len(entries) != 0 {
		t.Errorf("the backup left %v in its TMPDIR", entries)
	}
	m := metrics()
	for name, want := range map[string]float64{
		"devata_backup_last_success_timestamp_seconds":  float64(s.Time.UnixNano()) / 1e9,
		"devata_backup_size_bytes":                      float64(s.Size),
		"devata_backup_last_verified_timestamp_seconds": float64(s.Verified.Time.UnixNano()) / 1e9,
		"devata_backup_verified_revision":               float64(s.Revision),
	} {
		if m[name] != want {
			t.Errorf("after the backup job: %s = %v, want %v (the sidecar's)", name, m[name], want)
		}
	}

	time.Sleep(1100 * time.Millisecond) // the next proof's time is a later second
	w = b.workloadOf(t, "CronJob", "devata-etcd-verify", "devata-etcd-verify-29000000-h4v9c", map[string]string{
		podInventoryDir:   b.invDir,
		podReportsDir:     reports,
		"/work":           verifyWork,
		"/etc/devata/age": ageDir,
	})
	if !w.noToken {
		t.Errorf("the verify pod mounts a Kubernetes token: it calls no Kubernetes API")
	}
	out = run(w)
	if !strings.Contains(out, "restores: etcd") {
		t.Errorf("the verify job did not prove the newest snapshot:\n%s", out)
	}
	s2 := readSidecar(got[0])
	if s2.Verified == nil || !s2.Verified.Time.After(s.Verified.Time) {
		t.Errorf("the verify job's proof %+v is not recorded in the sidecar after the backup's %v", s2.Verified, s.Verified.Time)
	}
	m2 := metrics()
	if m2["devata_backup_last_verified_timestamp_seconds"] != float64(s2.Verified.Time.UnixNano())/1e9 {
		t.Errorf("after the verify job: last_verified %v, want its proof's time %v", m2["devata_backup_last_verified_timestamp_seconds"], s2.Verified.Time)
	}
	if m2["devata_backup_last_success_timestamp_seconds"] != m["devata_backup_last_success_timestamp_seconds"] || m2["devata_backup_size_bytes"] != m["devata_backup_size_bytes"] {
		t.Errorf("the verify job changed the backup's series: %v, was %v", m2, m)
	}
	if entries, _ := os.ReadDir(verifyWork); len(entries) != 0 {
		t.Errorf("the verify job left %v in its --work-dir", entries)
	}
}

// kubeEtcdSnapshot is an etcd snapshot of a real kube-apiserver's etcd
// (Nodes cp-1, cp-2, cp-3 created in it), restored as the homelab's three
// control planes' members, as a Talos control plane would stream it:
// the bbolt file followed by its sha256.
func kubeEtcdSnapshot(t *testing.T) []byte {
	t.Helper()
	ctx := t.Context()
	bin, err := testenv.BinDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{ControlPlaneStartTimeout: 90 * time.Second, ControlPlaneStopTimeout: 30 * time.Second}
	env.ControlPlane.APIServer = &envtest.APIServer{Path: filepath.Join(bin, "kube-apiserver")}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(bin, "etcd")}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop() //nolint:errcheck // a test's temporary control plane
	kc := kubernetes.NewForConfigOrDie(cfg)
	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		if _, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{env.ControlPlane.Etcd.URL.Host}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw.db")
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(raw, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := etcdsnapshot.NewV3(zap.NewNop()).Restore(etcdsnapshot.RestoreConfig{
		SnapshotPath: raw, Name: "cp-1", OutputDataDir: filepath.Join(dir, "cp-1"),
		PeerURLs:       []string{"https://10.5.0.2:2380"},
		InitialCluster: "cp-1=https://10.5.0.2:2380,cp-2=https://10.5.0.3:2380,cp-3=https://10.5.0.4:2380",
	}); err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(filepath.Join(dir, "cp-1", "member", "snap", "db"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

// What each account may do, asked of the API server as `kubectl auth can-i`
// asks it (SubjectAccessReview), and what the exec policy and Talos refuse
// when tried for real.
func testLeastPrivilege(t *testing.T, b *podBed) {
	kube := kubernetes.NewForConfigOrDie(b.admin)
	ctx := t.Context()

	// Each job's Talos identity carries exactly its role.
	for sa, want := range map[string]string{"devata-reconcile": "os:admin", "devata-drift": "os:admin", "devata-etcd-backup": "os:etcd:backup"} {
		if got := talosRoles(t, filepath.Join(b.talosDirs[sa], "config")); !slices.Equal(got, []string{want}) {
			t.Errorf("Talos identity of %s: roles %v, want [%s]", sa, got, want)
		}
	}

	// Talos gives nothing outside the control planes' allowedRoles and
	// allowedKubernetesNamespaces (inventory/controlplane.yaml).
	dc := dynamic.NewForConfigOrDie(b.admin)
	gvr := schema.GroupVersionResource{Group: "talos.dev", Version: "v1alpha1", Resource: "serviceaccounts"}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := map[[2]string]string{
		{"devata", "devata-reader"}: "Roles not allowed: [os:reader]",
		{"tenant", "devata-drift"}:  "Namespace is not allowed: tenant",
	}
	roles := map[string]string{"devata-reader": "os:reader", "devata-drift": "os:admin"}
	for k := range refused {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "talos.dev/v1alpha1", "kind": "ServiceAccount",
			"metadata": map[string]any{"name": k[1], "namespace": k[0]},
			"spec":     map[string]any{"roles": []any{roles[k[1]]}},
		}}
		if _, err := dc.Resource(gvr).Namespace(k[0]).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for k, want := range refused {
		got := ""
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && got == ""; time.Sleep(200 * time.Millisecond) {
			u, err := dc.Resource(gvr).Namespace(k[0]).Get(ctx, k[1], metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, _, _ = unstructured.NestedString(u.Object, "status", "failureReason")
		}
		if got != want {
			t.Errorf("talos.dev ServiceAccount %s/%s: failureReason %q, want %q", k[0], k[1], got, want)
		}
		if _, err := kube.CoreV1().Secrets(k[0]).Get(ctx, k[1], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Talos wrote a Secret %s/%s for a refused talos.dev ServiceAccount (%v)", k[0], k[1], err)
		}
	}

	// kubectl auth can-i, for each account.
	type ask struct {
		sa      string
		attrs   authorizationv1.ResourceAttributes
		allowed bool
	}
	lease := func(verb, name string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Namespace: "devata", Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Name: name}
	}
	exec := func(ns, pod string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "pods", Subresource: "exec", Name: pod}
	}
	asks := []ask{
		{"devata-drift", exec("default", "web-0"), false},
		{"devata-drift", exec("devata", "devata-reconcile-6d4cf56db6-q2x8n"), false},
		// RBAC cannot tell pods of kube-system apart: the admission policy
		// does, tried for real below
		{"devata-drift", exec("kube-system", "kube-apiserver-cp-1"), true},
		{"devata-drift", lease("get", "devata-reconcile"), false},
		{"devata-drift", lease("update", "devata-reconcile"), false},
		{"devata-drift", lease("patch", "devata-reconcile"), false},
		{"devata-drift", lease("delete", "devata-reconcile"), false},
		{"devata-drift", lease("create", ""), false},
		{"devata-drift", authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, true},
		{"devata-drift", authorizationv1.ResourceAttributes{Namespace: "devata", Verb: "get", Resource: "secrets", Name: "devata-reconcile"}, false},
		{"devata-reconcile", lease("get", "devata-reconcile"), true},
		{"devata-reconcile", lease("update", "devata-reconcile"), true},
		{"devata-reconcile", lease("update", "another-controller"), false},
		{"devata-reconcile", lease("patch", "devata-reconcile"), false},
		{"devata-reconcile", lease("delete", "devata-reconcile"), false},
		{"devata-reconcile", lease("create", ""), false},
		{"devata-reconcile", exec("default", "web-0"), false},
		{"devata-reconcile", authorizationv1.ResourceAttributes{Verb: "delete", Resource: "nodes", Name: "cp-1"}, false},
		{"devata-etcd-backup", authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, false},
		{"devata-etcd-backup", lease("get", "devata-reconcile"), false},
		{"devata-etcd-backup", exec("kube-system", "kube-apiserver-cp-1"), false},
		{"devata-etcd-backup", authorizationv1.ResourceAttributes{Namespace: "devata", Verb: "get", Resource: "secrets", Name: "devata-backup-s3"}, false},
		{"devata-etcd-verify", authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, false},
		{"devata-etcd-verify", authorizationv1.ResourceAttributes{Namespace: "devata", Verb: "get", Resource: "secrets", Name: "devata-backup-s3"}, false},
		{"devata-etcd-verify", exec("kube-system", "kube-apiserver-cp-1"), false},
	}
	for _, a := range asks {
		attrs := a.attrs
		sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:devata:" + a.sa,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:devata", "system:authenticated"},
			ResourceAttributes: &attrs,
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != a.allowed {
			t.Errorf("can %s %s %s/%s in namespace %q (name %q)? %v, want %v (%s)", a.sa, attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Namespace, attrs.Name, sar.Status.Allowed, a.allowed, sar.Status.Reason)
		}
	}

	// The same refusals with the accounts' own tokens, for real: the drift
	// account cannot take or free the writers' Lease, reconcile cannot
	// create another.
	drift, reconcile := b.tokenConfig(t, "devata-drift"), b.tokenConfig(t, "devata-reconcile")
	l, err := kube.CoordinationV1().Leases("devata").Get(ctx, "devata-reconcile", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = new("a compromised drift pod")
	if _, err := kubernetes.NewForConfigOrDie(drift).CoordinationV1().Leases("devata").Update(ctx, l, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the drift account updating the writer Lease: %v, want forbidden", err)
	}
	if _, err := kubernetes.NewForConfigOrDie(reconcile).CoordinationV1().Leases("devata").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "devata-reconcile-0-of-2"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the reconcile account creating a Lease: %v, want forbidden", err)
	}

	// Exec: into the agent's cilium-agent container it works (the drift
	// and reconcile runs above did it too); into any other pod of
	// kube-system, or another container of an agent pod, the admission
	// policy refuses it; elsewhere RBAC does.
	pods, err := kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentName := regexp.MustCompile(`^cilium-[bcdfghjklmnpqrstvwxz2456789]{5}$`)
	var agent, other string
	for _, p := range pods.Items {
		switch {
		case agent == "" && agentName.MatchString(p.Name):
			agent = p.Name
		case other == "" && !strings.HasPrefix(p.Name, "cilium"):
			other = p.Name
		}
	}
	if agent == "" {
		t.Fatalf("no Cilium agent pod in kube-system: %d pods", len(pods.Items))
	}
	// a pod that has the agent's container but not an agent's name
	decoy := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cilium-operator-5d8f7c9b4-x2k9q", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "cilium"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "cilium-agent", Image: "quay.io/cilium/cilium:v1.20.2"}}},
	}
	if _, err := kube.CoreV1().Pods("kube-system").Create(ctx, decoy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ex, err := netcheck.NewPodsExec(drift)
	if err != nil {
		t.Fatal(err)
	}
	try := func(ns, pod, container string) error {
		_, _, err := ex.Exec(ctx, ns, pod, container, netcheck.AgentCommand(nil))
		return err
	}
	const byPolicy = "devata-exec-cilium-agents-only"
	refusals := []struct{ ns, pod, container, by string }{
		{"kube-system", decoy.Name, "cilium-agent", byPolicy},
		{"kube-system", agent, "mount-cgroup", byPolicy},
		{"default", "web-0", "web", "forbidden"},
	}
	if other != "" {
		refusals = append(refusals, struct{ ns, pod, container, by string }{"kube-system", other, "", byPolicy})
	}
	// the API server loads admission policies asynchronously: wait until
	// the first refusal names it
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		err := try("kube-system", decoy.Name, "cilium-agent")
		if err != nil && strings.Contains(err.Error(), byPolicy) || time.Now().After(deadline) {
			break
		}
	}
	for _, r := range refusals {
		err := try(r.ns, r.pod, r.container)
		if err == nil || !strings.Contains(err.Error(), r.by) {
			t.Errorf("the drift account's exec into %s/%s container %q: %v, want refused (%s)", r.ns, r.pod, r.container, err, r.by)
		} else {
			t.Logf("exec into %s/%s container %q refused: %v", r.ns, r.pod, r.container, err)
		}
	}
	if err := try("kube-system", agent, "cilium-agent"); err != nil {
		t.Errorf("the drift account's exec into the agent %s: %v, want it to work", agent, err)
	}
}

// tokenConfig is a client config with a fresh token of the devata
// ServiceAccount sa and nothing else.
func (b *podBed) tokenConfig(t *testing.T, sa string) *rest.Config {
	t.Helper()
	tok, err := kubernetes.NewForConfigOrDie(b.admin).CoreV1().ServiceAccounts("devata").CreateToken(t.Context(), sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: b.admin.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: b.admin.CAData}}
}

// talosRoles are the roles (Organization) of the talosconfig's client
// certificate, as Talos' authorizer reads them.
func talosRoles(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientconfig.ReadFrom(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	crtPEM, err := base64.StdEncoding.DecodeString(cfg.Contexts[cfg.Context].Crt)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(crtPEM)
	if block == nil {
		t.Fatalf("%s: no certificate", path)
	}
	crt, err := stdx509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return crt.Subject.Organization
}

// everyGrantNeeded runs drift (through run, as a ServiceAccount) once per
// rule-verb of the drift account's grants, with all of them but that one,
// and fails for a grant whose absence leaves every Kubernetes-side check
// InSync: deploy/ would grant more than drift uses.
func everyGrantNeeded(t *testing.T, b *podBed, run func(sa string) map[string][]junitCase) {
	kube := kubernetes.NewForConfigOrDie(b.admin)
	ctx := t.Context()
	var all []grant
	for _, g := range jobCalls["devata-drift"] {
		for _, v := range strings.Split(g.verbs, ",") {
			one := g
			one.verbs = v
			all = append(all, one)
		}
	}
	for i, drop := range all {
		sa := fmt.Sprintf("devata-drift-minus-%d", i)
		if _, err := kube.CoreV1().ServiceAccounts("devata").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		byNS := map[string][]rbacv1.PolicyRule{}
		for j, g := range all {
			if j == i {
				continue
			}
			r := rbacv1.PolicyRule{APIGroups: []string{g.group}, Resources: []string{g.resource}, Verbs: []string{g.verbs}}
			if g.name != "" {
				r.ResourceNames = []string{g.name}
			}
			byNS[g.namespace] = append(byNS[g.namespace], r)
		}
		subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "devata"}}
		for ns, rules := range byNS {
			var err error
			if ns == "" {
				if _, err = kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: rules}, metav1.CreateOptions{}); err == nil {
					_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa}, Subjects: subjects, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: sa}}, metav1.CreateOptions{})
				}
			} else {
				if _, err = kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: rules}, metav1.CreateOptions{}); err == nil {
					_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa}, Subjects: subjects, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa}}, metav1.CreateOptions{})
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		cases := run(sa)
		var lost []string
		for _, check := range kubernetesChecks {
			for _, c := range cases[check] {
				if c.Failure != nil || c.Error != nil {
					lost = append(lost, check+" on "+c.Classname)
				}
			}
		}
		what := drop.expand()[0]
		if len(lost) == 0 {
			t.Errorf("drift without %q: every Kubernetes-side check still InSync: deploy/ grants it and drift does not use it", what)
			continue
		}
		t.Logf("drift without %q: %d results off InSync, e.g. %s", what, len(lost), lost[0])
	}
}
