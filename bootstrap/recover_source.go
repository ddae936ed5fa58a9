package bootstrap

import (
	"fmt"
	"path"
	"strings"
	"time"
)

// RecoverSource is the snapshot --recover-from names by URL
// (s3://bucket/prefix/latest or …/NAME), as its sidecar describes it: plan
// fetches only the sidecar, bootstrap the snapshot too. Set by the caller;
// nil for a local file.
type RecoverSource struct {
	// URL is the snapshot object's, without credentials or query.
	URL      string    `json:"url"`
	Cluster  string    `json:"cluster"`
	Time     time.Time `json:"time"`
	Revision int64     `json:"revision,omitempty"`
	Members  []string  `json:"members"`
	Size     int64     `json:"size"`
	SHA256   string    `json:"sha256"`
	// Verified is the last proof of restore recorded beside it (backup
	// verify); nil when none was ever made.
	Verified *RecoverProof `json:"verified"`
}

// RecoverProof is a sidecar's last proof of restore, as plan shows it.
type RecoverProof struct {
	Time        time.Time `json:"time"`
	Result      string    `json:"result"`
	EtcdVersion string    `json:"etcdVersion,omitempty"`
	Revision    int64     `json:"revision,omitempty"`
	Error       string    `json:"error,omitempty"`
}

// Line is the source in one line, for the text plan and bootstrap.
func (r *RecoverSource) Line() string {
	rev := "unknown"
	if r.Revision > 0 {
		rev = fmt.Sprint(r.Revision)
	}
	return fmt.Sprintf("%s: cluster %s, taken %s, etcd revision %s, members %s, %d bytes, sha256 %s; last proof of restore: %s",
		r.URL, r.Cluster, r.Time.UTC().Format(time.RFC3339), rev, strings.Join(r.Members, " "), r.Size, r.SHA256, r.Verified.text())
}

func (p *RecoverProof) text() string {
	if p == nil {
		return "never (devata backup verify proves one)"
	}
	s := fmt.Sprintf("%s %s", p.Result, p.Time.UTC().Format(time.RFC3339))
	if p.EtcdVersion != "" {
		s += " (etcd " + p.EtcdVersion + ")"
	}
	if p.Error != "" {
		s += ": " + p.Error
	}
	return s
}

// isURL says a recovery's snapshot path is a URL (plan, from a sidecar):
// talosctl needs a local copy of it.
func isURL(p string) bool { return strings.Contains(p, "://") }

// fetchCommands are the commands that fetch the snapshot at url and its
// sidecar to the current directory by hand, and check it, before talosctl
// bootstrap --recover-from reads it; and the local name.
func fetchCommands(url, sha256 string) (cmds []string, local string) {
	local = path.Base(url)
	switch {
	case strings.HasPrefix(url, "s3://"):
		cmds = []string{
			fmt.Sprintf("aws s3 cp %s ./%s   # with the endpoint and credentials backup etcd used (AWS_ENDPOINT_URL_S3, …)", url, local),
			fmt.Sprintf("aws s3 cp %s.json ./%s.json", url, local),
		}
	case strings.HasPrefix(url, "file://"):
		p := strings.TrimPrefix(url, "file://")
		cmds = []string{fmt.Sprintf("cp %s %s.json .", p, p)}
	}
	cmds = append(cmds, fmt.Sprintf("echo '%s  %s' | sha256sum -c   # the sidecar's sha256: refuse the copy when it differs", sha256, local))
	return cmds, local
}

// writeRecoverSource is the markdown runbook's section on the snapshot.
func writeRecoverSource(b *strings.Builder, r *RecoverSource) {
	b.WriteString("## The snapshot\n\n")
	fmt.Fprintf(b, "- Object: `%s`\n", r.URL)
	fmt.Fprintf(b, "- Cluster: %s; taken %s\n", r.Cluster, r.Time.UTC().Format(time.RFC3339))
	rev := "unknown"
	if r.Revision > 0 {
		rev = fmt.Sprint(r.Revision)
	}
	fmt.Fprintf(b, "- etcd revision: %s; members: %s\n", rev, strings.Join(r.Members, ", "))
	fmt.Fprintf(b, "- Size: %d bytes; sha256 `%s`\n", r.Size, r.SHA256)
	fmt.Fprintf(b, "- Last proof of restore: %s\n\n", r.Verified.text())
	b.WriteString("Only its sidecar was read. `devata bootstrap --recover-from` fetches the snapshot into a private temporary directory, ")
	b.WriteString("checks its size and sha256 against the sidecar and its members against the inventory before any machine is asked, and removes the copy afterwards.\n\n")
}
