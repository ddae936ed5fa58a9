package deploy_test

import (
	"path"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/resmap"

	"devata.dev/devata/config"
)

// The backup and the proof of restore in the cluster (issue 34 item 6):
// the backup goes to object storage, never to a volume of the cluster it
// restores, and proves and prunes in the same run; the verify job proves
// the newest snapshot at the same destination; both record their metrics
// in the one textfile, on the volume drift's textfile is on, and take the
// S3 credentials from the Secret devata-backup-s3 by key, which no other
// job reads; their temporary copies go to an emptyDir (the root
// filesystem is read-only).
func TestKustomizeBackupJobs(t *testing.T) {
	forEachBuild(t, func(t *testing.T, _ string, res resmap.ResMap) { kustomizeBackupJobs(t, res) })
}

func kustomizeBackupJobs(t *testing.T, res resmap.ResMap) {
	type job struct {
		args    []string
		env     map[string]map[string]any // name → the env entry
		mounts  map[string]string         // mountPath → volume
		volumes map[string]map[string]any // name → the volume
	}
	jobOf := func(name string) job {
		r := find(res, "CronJob", name)
		if r == nil {
			t.Fatalf("deploy/ has no CronJob %s", name)
		}
		pod := field[map[string]any](t, r, "spec.jobTemplate.spec.template.spec")
		c := asSlice(pod["containers"])[0].(map[string]any)
		j := job{env: map[string]map[string]any{}, mounts: map[string]string{}, volumes: map[string]map[string]any{}}
		for _, a := range asSlice(c["args"]) {
			j.args = append(j.args, a.(string))
		}
		for _, e := range asSlice(c["env"]) {
			e := e.(map[string]any)
			j.env[e["name"].(string)] = e
		}
		for _, m := range asSlice(c["volumeMounts"]) {
			m := m.(map[string]any)
			j.mounts[m["mountPath"].(string)] = m["name"].(string)
		}
		for _, v := range asSlice(pod["volumes"]) {
			v := v.(map[string]any)
			j.volumes[v["name"].(string)] = v
		}
		return j
	}
	arg := func(j job, flag string) string {
		for _, a := range j.args {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v
			}
		}
		return ""
	}
	// volumeOf is the volume a path in the container is on.
	volumeOf := func(j job, p string) map[string]any {
		best := ""
		for m := range j.mounts {
			if (p == m || strings.HasPrefix(p, m+"/")) && len(m) > len(best) {
				best = m
			}
		}
		if best == "" {
			return nil
		}
		return j.volumes[j.mounts[best]]
	}
	pvc := func(v map[string]any) any {
		c, _ := v["persistentVolumeClaim"].(map[string]any)
		return c["claimName"]
	}

	backupJob, verifyJob, drift := jobOf("devata-etcd-backup"), jobOf("devata-etcd-verify"), jobOf("devata-drift")
	to := arg(backupJob, "--to")
	if !strings.HasPrefix(to, "s3://") || !strings.HasSuffix(to, "/") {
		t.Errorf("the backup writes --to %q, want s3://BUCKET/PREFIX/: a snapshot held by the cluster it restores is no backup", to)
	}
	for _, want := range []string{"--verify", "--prune"} {
		if !slices.Contains(backupJob.args, want) {
			t.Errorf("the backup's args %q lack %s: one scheduled run backs up, proves and prunes", backupJob.args, want)
		}
	}
	if !slices.ContainsFunc(backupJob.args, func(a string) bool { return strings.HasPrefix(a, "--keep-") }) {
		t.Errorf("the backup's args %q keep nothing: --prune needs a --keep-* policy", backupJob.args)
	}
	if latest := arg(verifyJob, "--latest"); latest != to {
		t.Errorf("the verify job proves --latest %q, the backup writes to %q: they must be the same", latest, to)
	}
	if verifyJob.args[0] != "backup" || verifyJob.args[1] != "verify" {
		t.Errorf("the verify job runs %q, want backup verify", verifyJob.args)
	}

	prom := arg(backupJob, "--prom-file")
	driftProm := arg(drift, "--prom-file")
	if prom == "" || arg(verifyJob, "--prom-file") != prom {
		t.Errorf("--prom-file: backup %q, verify %q: both write the one textfile (each keeps the other's series)", prom, arg(verifyJob, "--prom-file"))
	}
	if prom == driftProm || path.Dir(prom) != path.Dir(driftProm) || !strings.HasSuffix(prom, ".prom") {
		t.Errorf("the backup's textfile %q must be a .prom file of its own beside drift's %q (the collector's directory)", prom, driftProm)
	}
	for name, j := range map[string]job{"backup": backupJob, "verify": verifyJob} {
		if v, d := volumeOf(j, path.Dir(prom)), volumeOf(drift, path.Dir(driftProm)); v == nil || pvc(v) == nil || pvc(v) != pvc(d) {
			t.Errorf("the %s job's %s is on %v, drift's textfile on %v: want drift's volume", name, prom, v, d)
		}
		for _, key := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3", "AWS_REGION"} {
			e := j.env[key]
			ref, _ := e["valueFrom"].(map[string]any)["secretKeyRef"].(map[string]any)
			if ref["name"] != "devata-backup-s3" || ref["key"] != key {
				t.Errorf("the %s job's %s is %v, want the key %s of the Secret devata-backup-s3", name, key, e, key)
			}
			if optional := ref["optional"] == true; optional != (key == "AWS_ENDPOINT_URL_S3" || key == "AWS_REGION") {
				t.Errorf("the %s job's %s: optional %v; only the endpoint and the region may be left out", name, key, optional)
			}
		}
	}
	tmp, _ := backupJob.env["TMPDIR"]["value"].(string)
	if v := volumeOf(backupJob, tmp); v == nil || v["emptyDir"] == nil {
		t.Errorf("the backup's TMPDIR %q is on %v, want an emptyDir (the private copy before the upload; the root filesystem is read-only)", tmp, v)
	}
	if v := volumeOf(verifyJob, arg(verifyJob, "--work-dir")); v == nil || v["emptyDir"] == nil {
		t.Errorf("the verify job's --work-dir %q is on %v, want an emptyDir", arg(verifyJob, "--work-dir"), v)
	}

	// Encrypted at rest without a flag: the setting backup.encrypt-to
	// from the ConfigMap devata-backup, required (no install backs up in
	// clear without deciding to); both jobs read an encrypted snapshot
	// with the identity of the Secret devata-backup-age, on a volume.
	ref, _ := backupJob.env[config.EnvBackupEncryptTo]["valueFrom"].(map[string]any)["configMapKeyRef"].(map[string]any)
	if ref["name"] != "devata-backup" || ref["key"] != "encrypt-to" || ref["optional"] == true {
		t.Errorf("the backup's %s is %v, want the key encrypt-to of the ConfigMap devata-backup, not optional", config.EnvBackupEncryptTo, backupJob.env[config.EnvBackupEncryptTo])
	}
	if slices.ContainsFunc(backupJob.args, func(a string) bool { return strings.HasPrefix(a, "--encrypt-to") }) {
		t.Errorf("the backup's args %q pass --encrypt-to, which replaces the ConfigMap's recipients", backupJob.args)
	}
	if _, set := verifyJob.env[config.EnvBackupEncryptTo]; set {
		t.Errorf("the verify job sets %s: it encrypts nothing", config.EnvBackupEncryptTo)
	}
	for name, j := range map[string]job{"backup": backupJob, "verify": verifyJob} {
		id, _ := j.env["DEVATA_AGE_IDENTITY"]["value"].(string)
		v := volumeOf(j, id)
		sec, _ := v["secret"].(map[string]any)
		if id == "" || sec["secretName"] != "devata-backup-age" || path.Base(id) != "keys.txt" {
			t.Errorf("the %s job's DEVATA_AGE_IDENTITY %q is on %v, want keys.txt of the Secret devata-backup-age", name, id, v)
		}
		if j.env["DEVATA_ALLOW_SHARED_AGE_IDENTITY"]["value"] != "true" {
			t.Errorf("the %s job's identity is on a Secret volume an fsGroup makes group-readable: it needs DEVATA_ALLOW_SHARED_AGE_IDENTITY=true", name)
		}
	}

	// no other workload gets the S3 credentials
	for _, r := range res.Resources() {
		if r.GetKind() == "CronJob" && (r.GetName() == "devata-etcd-backup" || r.GetName() == "devata-etcd-verify") {
			continue
		}
		for _, secret := range []string{"devata-backup-s3", "devata-backup-age"} {
			if y, err := r.AsYAML(); err == nil && strings.Contains(string(y), secret) {
				t.Errorf("%s/%s refers to the Secret %s: only the backup and verify jobs need it", r.GetKind(), r.GetName(), secret)
			}
		}
	}
}
