package golden

import "testing"

func TestNormalise(t *testing.T) {
	for _, tt := range []struct {
		name, text, want string
		rules            []Rule
	}{
		{"literal whole address only", "cp-1 127.0.0.1:4000, cp-2 127.0.0.1:40001",
			"cp-1 <cp-1>, cp-2 127.0.0.1:40001", []Rule{Literal("127.0.0.1:4000", "<cp-1>")}},
		{"literal path inside a longer path", "wrote /tmp/T1/001/out/cp-1.yaml",
			"wrote <dir>/out/cp-1.yaml", []Rule{Literal("/tmp/T1/001", "<dir>")}},
		{"literal at the end", "dir /tmp/x", "dir <dir>", []Rule{Literal("/tmp/x", "<dir>")}},
		{"literal ending in a separator", "in /tmp/x/ and /tmp/x/a", "in <dir>/ and <dir>/a", []Rule{Literal("/tmp/x/", "<dir>/")}},
		{"literal twice, one inside a longer port", "1.2.3.4:50 1.2.3.4:500 1.2.3.4:50", "<a> 1.2.3.4:500 <a>", []Rule{Literal("1.2.3.4:50", "<a>")}},
		{"pattern with a group", "days_left{m=\"cp-1\"} 364.99977",
			"days_left{m=\"cp-1\"} <days>", []Rule{Pattern(`(days_left\{[^}]*\}) \S+`, "$1 <days>")}},
		{"rules in order", "a b", "c c", []Rule{Literal("a", "b"), Literal("b", "c")}},
		{"no match leaves text", "unchanged\n", "unchanged\n", []Rule{Pattern(`\d+ms`, "<ms>")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Normalise(tt.text, tt.rules...); got != tt.want {
				t.Errorf("Normalise(%q) = %q, want %q", tt.text, got, tt.want)
			}
		})
	}
}
