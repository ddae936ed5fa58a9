package redact

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestRedactValueURLCredentials(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://admin:s3cret@proxy:3128", "http://******@proxy:3128"},
		{"https://token@git.lan/repo.git", "https://******@git.lan/repo.git"},
		{"http://u:p@ss@proxy:3128/x@y", "http://******@proxy:3128/x@y"},
		{"--proxy=socks5://u:p@h:1080 --other=http://a:b@c", "--proxy=socks5://******@h:1080 --other=http://******@c"},
		{"http://a:b@h1,http://c:d@h2", "http://******@h1,http://******@h2"},
		{"https://mirror.lan:5000", "https://mirror.lan:5000"},
		{"https://host/path?mail=a@b.c", "https://host/path?mail=a@b.c"},
		{"admin@example.com", "admin@example.com"},
		// credentials in the query: the value goes, the name and the rest stay
		{"https://cfg.lan/config?token=abc&node=cp-1", "https://cfg.lan/config?token=******&node=cp-1"},
		{"https://api.lan/v1?api_key=abc;access_token=def#top", "https://api.lan/v1?api_key=******;access_token=******#top"},
		{"https://s3.lan/b/cni.yaml?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20250101&X-Amz-Signature=0badc0de&X-Amz-Expires=3600",
			"https://s3.lan/b/cni.yaml?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=******&X-Amz-Signature=******&X-Amz-Expires=3600"},
		{"https://acct.blob.lan/c/f?sv=2024-01-01&sig=abc%3D&se=2030", "https://acct.blob.lan/c/f?sv=2024-01-01&sig=******&se=2030"},
		{"https://siderolink.lan:8099/?jointoken=abc", "https://siderolink.lan:8099/?jointoken=******"},
		{"https://siderolink.lan:8099/?jointoken=%2A%2A%2A%2A%2A%2A", "https://siderolink.lan:8099/?jointoken=******"},
		{"https://h/?KEY=a&Password=b&client_secret=c&X-Goog-Signature=d&auth=e&sig=f", "https://h/?KEY=******&Password=******&client_secret=******&X-Goog-Signature=******&auth=******&sig=******"},
		{"http://u:p@h/?token=t", "http://******@h/?token=******"},
		{"talos.config=https://cfg.lan/c?token=abc talos.platform=metal", "talos.config=https://cfg.lan/c?token=****** talos.platform=metal"},
		{`{"url":"https://h/?token=abc","other":"x"}`, `{"url":"https://h/?token=******","other":"x"}`},
		// a value runs to "&", ";", "#" or whitespace: a second URL joined
		// by a comma goes with it (more is hidden, nothing is shown)
		{"https://a/?token=x,https://b/?sig=y", "https://a/?token=******"},
		// names that only look like credentials, empty values, and no URL at all
		{"https://h/?monkey=1&publickey=2&keys=3&token=&sort=key", "https://h/?monkey=1&publickey=2&keys=3&token=&sort=key"},
		{"what?token=abc", "what?token=abc"},
	} {
		got, changed := credentials(c.in)
		if got != c.want || changed != (c.in != c.want) {
			t.Errorf("credentials(%q) = %q, %t; want %q", c.in, got, changed, c.want)
		}
	}
}

// Names are judged by shape, any case and any separator (issue 31, probe
// 6): extraArgs and flags have no secret field of their own.
func TestSecretNamesByShape(t *testing.T) {
	for name, want := range map[string]bool{
		"basic-auth-password": true, "oidc-client-secret": true, "client_secret": true, "api-token": true,
		"x-api-key": true, "X-Api-Key": true, "PRIVATE_KEY": true, "--service-account-private-key-file": true,
		"secretboxEncryptionSecret": true, "key": true, "passphrase": true, "AccessKey": true,
		"image": false, "keyUsage": false, "name": false, "extraArgs": false, "advertisedSubnets": false,
	} {
		if got := secretName(name); got != want {
			t.Errorf("secretName(%q) = %t, want %t", name, got, want)
		}
	}
	for in, want := range map[string]string{
		"--oidc-client-secret=abc --v=2":        "--oidc-client-secret=" + Redacted + " --v=2",
		"-api-token=xyz":                        "-api-token=" + Redacted,
		"--listen=0.0.0.0:443":                  "--listen=0.0.0.0:443",
		"CLIENT_SECRET=abc":                     "CLIENT_SECRET=abc", // no dash: not a flag (env lists are handled by field)
		"--basic-auth-password=p@ss --user=bob": "--basic-auth-password=" + Redacted + " --user=bob",
	} {
		if got := flagCredentials(in); got != want {
			t.Errorf("flagCredentials(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSecretHashOneFormPerSecret: a PEM secret hashes the same whether a
// config holds it base64-encoded (v1alpha1) or as PEM (Talos 1.14's
// documents), and another value hashes otherwise.
func TestSecretHashOneFormPerSecret(t *testing.T) {
	pem := "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIABC\n-----END EC PRIVATE KEY-----"
	b64 := base64.StdEncoding.EncodeToString([]byte(pem + "\n"))
	if secretHash(pem) != secretHash(b64) || secretHash(pem+"\n") != secretHash(pem) {
		t.Error("one PEM key hashes differently as base64 and as PEM")
	}
	other := strings.Replace(pem, "ABC", "ABD", 1)
	if secretHash(other) == secretHash(b64) {
		t.Error("another key hashes as the first")
	}
	// a plain secret is hashed as it stands: base64 that is not a PEM is not decoded
	if secretHash("c2VjcmV0") == secretHash("secret") {
		t.Error("a base64 value that is no PEM was decoded")
	}
}
