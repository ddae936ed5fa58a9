// Package drift owns the result model every check shares: a Result per check
// and machine, the Report that collects them, its renderers (table, JSON, JUnit
// XML, Prometheus textfile) and the exit codes of `devata drift`.
// It does not observe machines: talosapi/, machines/, netcheck/ and storagecheck/ do, and
// hand their findings here already redacted.
package drift
