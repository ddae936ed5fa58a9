package drift

import (
	"slices"
	"testing"
)

func TestCompareNames(t *testing.T) {
	want := []string{"cp-1", "cp-2", "cp-10", "node", "node-01", "node-1", "node-2a", "node-2b", "node-10", "worker-9", "worker-10"}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, compareNames)
	if !slices.Equal(got, want) {
		t.Errorf("sorted %q, want %q", got, want)
	}
	for _, a := range want {
		for _, b := range want {
			if (compareNames(a, b) == 0) != (a == b) || compareNames(a, b) != -compareNames(b, a) {
				t.Errorf("compareNames(%q, %q) = %d is not a total order", a, b, compareNames(a, b))
			}
		}
	}
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                                "plain",
		"  padded \n":                          "padded",
		"1 error occurred:\n\t* a\n\n":         "1 error occurred: a",
		"2 errors occurred:\n\t* a\n\t* b\n\n": "2 errors occurred: a; b",
		"first\r\nsecond":                      "first; second",
		"":                                     "",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRungOrder(t *testing.T) {
	for i, r := range Rungs() {
		if r.order() != i {
			t.Errorf("%s.order() = %d, want %d", r, r.order(), i)
		}
	}
	if Rung("custom").order() != len(Rungs()) {
		t.Errorf("an unknown rung does not sort last")
	}
}
