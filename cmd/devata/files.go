package main

import (
	"io"

	"devata.dev/devata/internal/outfile"
)

// writeFileWith writes a report file (0644) as internal/outfile writes:
// atomically over a regular file (readers never see half a file), through
// a named pipe or /dev/stdout, and never over a symbolic link or a device.
func writeFileWith(path string, write func(io.Writer) error) error {
	return outfile.Write(path, 0o644, false, write)
}
