package talosapi

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestPathChanges(t *testing.T) {
	const v1 = "version: v1alpha1\n"
	tests := []struct {
		name     string
		old, new string
		want     []string
	}{
		{"equal", v1 + "machine:\n  type: worker\n", v1 + "machine:\n  type: worker\n", nil},
		{"scalar", v1 + "machine:\n  network:\n    hostname: a\n", v1 + "machine:\n  network:\n    hostname: b\n",
			[]string{`machine.network.hostname: "a" → "b"`}},
		{"type of a scalar", v1 + "machine:\n  x: 1\n", v1 + "machine:\n  x: \"1\"\n",
			[]string{`machine.x: 1 → "1"`}},
		{"bool and null", v1 + "machine:\n  a: true\n  b: ~\n", v1 + "machine:\n  a: false\n  b: x\n",
			[]string{`machine.a: true → false`, `machine.b: ~ → "x"`}},
		{"map key added and removed", v1 + "cluster:\n  apiServer:\n    extraArgs:\n      bar: y\n", v1 + "cluster:\n  apiServer:\n    extraArgs:\n      foo: x\n",
			[]string{`cluster.apiServer.extraArgs.bar: removed`, `cluster.apiServer.extraArgs.foo: added "x"`}},
		{"key that is not a word", v1 + "machine:\n  sysctls:\n    net.ipv4.ip_forward: \"1\"\n    vm.swappiness: \"10\"\n", v1 + "machine:\n  sysctls:\n    vm.swappiness: \"10\"\n",
			[]string{`machine.sysctls["net.ipv4.ip_forward"]: removed`}},
		{"subtree added", v1 + "machine: {}\n", v1 + "machine:\n  kubelet:\n    extraArgs:\n      a: b\n    labels: [x, 2]\n",
			[]string{`machine.kubelet: added {extraArgs: {a: "b"}, labels: ["x", 2]}`}},
		{"map became a list", v1 + "machine:\n  x: {a: 1}\n", v1 + "machine:\n  x: [1]\n",
			[]string{`machine.x: {a: 1} → [1]`}},
		{"list by index", v1 + "machine:\n  certSANs: [a, b, c]\n", v1 + "machine:\n  certSANs: [a, B]\n",
			[]string{`machine.certSANs[1]: "b" → "B"`, `machine.certSANs[2]: removed`}},
		{"list grows by index", v1 + "machine:\n  certSANs: []\n", v1 + "machine:\n  certSANs: [a]\n",
			[]string{`machine.certSANs[0]: added "a"`}},
		{"list by name", v1 + "machine:\n  kernel:\n    modules:\n      - name: br_netfilter\n      - name: zfs\n        parameters: [a=1]\n",
			v1 + "machine:\n  kernel:\n    modules:\n      - name: zfs\n        parameters: [a=2]\n      - name: wireguard\n",
			[]string{
				`machine.kernel.modules[name="br_netfilter"]: removed`,
				`machine.kernel.modules[name="zfs"].parameters[0]: "a=1" → "a=2"`,
				`machine.kernel.modules[name="wireguard"]: added {name: "wireguard"}`,
			}},
		{"list by name reordered", v1 + "m:\n  - name: a\n  - name: b\n", v1 + "m:\n  - name: b\n  - name: a\n",
			[]string{`m: reordered`}},
		{"names repeated: by index", v1 + "m:\n  - name: a\n    v: 1\n  - name: a\n    v: 2\n", v1 + "m:\n  - name: a\n    v: 1\n  - name: a\n    v: 3\n",
			[]string{`m[1].v: 2 → 3`}},
		{"not every element named: by index", v1 + "m:\n  - name: a\n  - other: b\n", v1 + "m:\n  - name: a\n  - other: c\n",
			[]string{`m[1].other: "b" → "c"`}},
		{"document added", v1 + "machine: {}\n", v1 + "machine: {}\n---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\nprovisioning:\n  minSize: 10GiB\n",
			[]string{`UserVolumeConfig/data: added document`}},
		{"document removed", v1 + "machine: {}\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: a\n", v1 + "machine: {}\n",
			[]string{`HostnameConfig: removed document`}},
		{"documents keyed by kind and name, not order",
			v1 + "machine: {}\n---\nkind: UserVolumeConfig\nname: a\nsize: 1\n---\nkind: UserVolumeConfig\nname: b\nsize: 2\n",
			"kind: UserVolumeConfig\nname: b\nsize: 3\n---\n" + v1 + "machine: {}\n---\nkind: UserVolumeConfig\nname: a\nsize: 1\n",
			[]string{`UserVolumeConfig/b.size: 2 → 3`}},
		{"redacted value stays redacted", v1 + "machine:\n  token: '******'\n  ca:\n    crt: abc\n", v1 + "machine:\n  token: '******'\n  ca:\n    crt: abc\n    key: '******'\n",
			[]string{`machine.ca.key: added "******"`}},
		{"control characters quoted", v1 + "m: a\n", v1 + "m: \"\\e[31mred\\u202e\"\n",
			[]string{`m: "a" → "\x1b[31mred\u202e"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pathChanges([]byte(tt.old), []byte(tt.new), maxChanges)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestPathChangesBounded(t *testing.T) {
	var old, new strings.Builder
	old.WriteString("version: v1alpha1\nmachine:\n  sysctls:\n")
	new.WriteString("version: v1alpha1\nmachine:\n  sysctls:\n")
	for i := range 60 {
		fmt.Fprintf(&old, "    k%02d: a\n", i)
		fmt.Fprintf(&new, "    k%02d: b\n", i)
	}
	got, err := pathChanges([]byte(old.String()), []byte(new.String()), 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 51 || got[49] != `machine.sysctls.k49: "a" → "b"` || got[50] != "… and 10 more" {
		t.Errorf("%d lines, ending %q", len(got), got[len(got)-2:])
	}
	long := strings.Repeat("x", 200)
	got, err = pathChanges([]byte("version: v1alpha1\nm: a\n"), []byte("version: v1alpha1\nm: "+long+"\n"), 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len([]rune(got[0])) > len("m: \"a\" → ")+maxValue || !strings.HasSuffix(got[0], "…") {
		t.Errorf("a long value is not cut: %q", got)
	}
}

func TestPathChangesRefusesBrokenYAML(t *testing.T) {
	if _, err := pathChanges([]byte("version: v1alpha1\n"), []byte("a: [\n"), 50); err == nil || !strings.Contains(err.Error(), "desired config: document 1") {
		t.Errorf("err = %v, want the desired config's document named", err)
	}
}
