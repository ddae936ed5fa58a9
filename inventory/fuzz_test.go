package inventory_test

import (
	"os"
	"path/filepath"
	"testing"

	"devata.dev/devata/inventory"
)

// FuzzParse feeds arbitrary bytes to the strict decoder, defaulting and
// validation: whatever the input, Parse returns an inventory or located errors,
// and never panics. The seed corpus is every inventory under testdata.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := inventory.Parse(data, "testdata/fuzz.yaml")
		if (inv == nil) == (err == nil) {
			t.Fatalf("Parse returned inventory %v and error %v: want exactly one", inv != nil, err)
		}
		if err != nil {
			for _, fe := range inventory.FieldErrors(err) {
				if fe.File != "testdata/fuzz.yaml" || fe.Msg == "" {
					t.Fatalf("error without file or message: %#v", fe)
				}
			}
			if len(inventory.FieldErrors(err)) == 0 {
				t.Fatalf("error is not a list of located errors: %v", err)
			}
		}
	})
}
