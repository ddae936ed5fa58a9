package sim

import "strings"

// TotalCalls is the number of API calls every machine of the fleet has
// served, dry runs counted once, for benchmarks' calls per second.
func (f *Fleet) TotalCalls() int {
	n := 0
	for _, m := range f.Machines() {
		m.callsMu.Lock()
		for method, c := range m.calls {
			// each call is counted once by its full name
			if strings.HasPrefix(method, "/") {
				n += c
			}
		}
		m.callsMu.Unlock()
	}
	return n
}
