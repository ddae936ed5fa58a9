package talosapi_test

import (
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/talosapi"
)

func renderedExample(t *testing.T) map[string][]byte {
	t.Helper()
	_, _, configs := simtest.Rendered(t)
	return configs
}

func TestDiffConfigs(t *testing.T) {
	cfgs := renderedExample(t)
	cp1 := cfgs["cp-1"]
	tests := []struct {
		name           string
		active         []byte
		equal          bool
		wantInText     []string
		notInText      []string
		changedSecrets int
		changes        []string
	}{
		{"identical", cp1, true, nil, nil, 0, nil},
		{"drifted field", []byte(strings.Replace(string(cp1), "hostname: cp-1", "hostname: cp-one", 1)), false, []string{"-        hostname: cp-one", "+        hostname: cp-1"}, nil, 0,
			[]string{`machine.network.hostname: "cp-one" → "cp-1"`}},
		// the secret changed, its redacted value did not: no path shows it
		{"rotated token only", []byte(strings.Replace(string(cp1), tokenOf(t, cp1), "abcdef.0123456789abcdef", 1)), false, nil, []string{"abcdef.0123456789abcdef"}, 1, nil},
		// a secret that appears (machinery encodes the missing one as "") shows
		// as redacted, in the changes as in the text
		{"secret added", []byte(strings.Replace(string(cp1), "    token: "+tokenOf(t, cp1)+"\n", "", 1)), false, []string{"+    token: '******'"}, nil, 1,
			[]string{`machine.token: "" → "******"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := talosapi.DiffConfigs(tt.active, cp1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Equal != tt.equal {
				t.Fatalf("Equal = %v, want %v\n%s", d.Equal, tt.equal, d.Text)
			}
			for _, w := range tt.wantInText {
				if !strings.Contains(d.Text, w) {
					t.Errorf("diff lacks %q:\n%s", w, d.Text)
				}
			}
			if !slices.Equal(d.Changes, tt.changes) {
				t.Errorf("changes %q, want %q", d.Changes, tt.changes)
			}
			for _, w := range append(tt.notInText, tokenOf(t, cp1)) {
				if strings.Contains(d.Text+d.Summary()+strings.Join(d.Changes, "\n"), w) {
					t.Errorf("diff shows secret %q", w)
				}
			}
			if len(d.ChangedSecrets) != tt.changedSecrets {
				t.Errorf("changed secrets %v, want %d", d.ChangedSecrets, tt.changedSecrets)
			}
		})
	}
}

// tokenOf returns the machine token of a rendered config, a secret.
func tokenOf(t *testing.T, cfg []byte) string {
	t.Helper()
	for _, line := range strings.Split(string(cfg), "\n") {
		if strings.HasPrefix(line, "    token: ") {
			return strings.TrimPrefix(line, "    token: ")
		}
	}
	t.Fatal("no machine token in config")
	return ""
}
