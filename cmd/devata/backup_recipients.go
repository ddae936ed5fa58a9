package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"unicode/utf8"

	"filippo.io/age"

	"devata.dev/devata/render"
)

// The bounds of a recipients file (--encrypt-to-file): a line as long as
// sshd(8) and age take one, and a file far larger than any list of keys.
const (
	maxRecipientsFile = 1 << 20
	maxRecipientLine  = 8 << 10
)

// readRecipientsFile reads a recipients file in age's -R format: one
// recipient a line (age1…, age1pq1…, ssh-ed25519 or ssh-rsa with its
// comment), blank lines and lines starting with # ignored. It must be a
// regular file, not a symbolic link, of at most maxRecipientsFile bytes.
// Unlike age -R, an SSH key of a type age cannot encrypt to is refused
// rather than skipped: a recipient left out without a word is a key that
// later opens nothing. Errors name the file and line, never a line's
// content.
func readRecipientsFile(path string) ([]age.Recipient, error) {
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: give the file of recipients, one a line", err)
	case fi.Mode()&os.ModeSymlink != 0:
		return nil, fmt.Errorf("%s is a symbolic link, which devata does not follow for a recipients file: give the file itself", path)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file: give the file of recipients, one a line", path)
	case fi.Size() > maxRecipientsFile:
		return nil, fmt.Errorf("%s is %d bytes, more than the %d MiB devata reads as a recipients file: check it is the file you meant", path, fi.Size(), maxRecipientsFile>>20)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if now, err := f.Stat(); err != nil || !now.Mode().IsRegular() || !os.SameFile(fi, now) {
		return nil, fmt.Errorf("%s changed while it was opened: try again", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRecipientsFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxRecipientsFile {
		return nil, fmt.Errorf("%s grew past the %d MiB devata reads as a recipients file while it was read", path, maxRecipientsFile>>20)
	}
	var out []age.Recipient
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxRecipientLine+1)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		switch {
		case len(line) == 0 || line[0] == '#':
			continue
		case !utf8.Valid(line):
			return nil, fmt.Errorf("%s line %d is not UTF-8 text: a recipients file holds public keys, one a line", path, n)
		}
		r, err := render.ParseAgeRecipient(string(line))
		if err != nil {
			return nil, fmt.Errorf("%s line %d %w", path, n, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s line %d is longer than %d KiB, longer than any public key: check it is a recipients file", path, n+1, maxRecipientLine>>10)
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no recipient (only blank lines and # comments): add one public key a line (age1…, ssh-ed25519 …)", path)
	}
	return out, nil
}
