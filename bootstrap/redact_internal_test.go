package bootstrap

import "testing"

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
	} {
		got, changed := redactValue(c.in)
		if got != c.want || changed != (c.in != c.want) {
			t.Errorf("redactValue(%q) = %q, %t; want %q", c.in, got, changed, c.want)
		}
	}
}
