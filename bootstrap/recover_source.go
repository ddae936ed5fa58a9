package bootstrap

import (
	"fmt"
	"path"
	"strings"
)

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
