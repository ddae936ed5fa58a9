package backup

// Encryption at rest (issue 34, item 2): a snapshot encrypted to age
// recipients as it is written, after it was verified in clear in a
// private directory, and decrypted on every read into a private
// directory, its stored bytes and its clear text each held to the
// sidecar. The clear text never lands beside the snapshot; no identity
// is ever quoted.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"filippo.io/age"

	"devata.dev/devata/snapshot"
)

// EncryptionAge is the one Encryption format: age-encryption.org/v1,
// binary, as `age -e -r RECIPIENT` writes it (`age -d -i IDENTITY FILE`
// opens it).
const EncryptionAge = "age"

// Encryption is the sidecar's "encryption": how the snapshot is
// encrypted at rest. Nothing in it is secret.
type Encryption struct {
	Format string `json:"format"`
	// Recipients are the public keys (age1…, or ssh-ed25519/ssh-rsa
	// AAAA… without the comment) it is encrypted to: the
	// identity of any one of them opens it.
	Recipients []string `json:"recipients"`
	// PlaintextSize and PlaintextSHA256 are the snapshot's in clear (etcd's
	// trailing sha256 included), what backup etcd verified and what a
	// restore sends to Talos; the sidecar's size and sha256 are those of
	// the stored, encrypted file.
	PlaintextSize   int64  `json:"plaintextSize"`
	PlaintextSHA256 string `json:"plaintextSha256"`
}

// Keys open encrypted snapshots. Load is called only when a snapshot
// turns out to be encrypted, so that a snapshot in clear needs no
// identity: it returns the identities and where they came from, for
// messages ("1 age identity from age identity file F"); none is no error.
type Keys func() (ids []age.Identity, from string, err error)

// ErrNoKey is wrapped when no given identity opens an encrypted snapshot
// (or none is given): the snapshot may be fine, the key is missing.
var ErrNoKey = errors.New("no age identity given opens it")

// recipientNames are the public strings of rs, as the sidecar records them.
func recipientNames(rs []age.Recipient) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		if s, ok := r.(fmt.Stringer); ok {
			out = append(out, s.String())
		}
	}
	return out
}

// encryptFile encrypts the file plain to rs into out (0600, created, not
// replaced), streaming, and returns the size and sha256 of what it wrote.
func encryptFile(ctx context.Context, plain, out string, rs []age.Recipient) (int64, string, error) {
	src, err := os.Open(plain)
	if err != nil {
		return 0, "", err
	}
	defer src.Close()
	dst, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, "", err
	}
	defer dst.Close()
	if err := dst.Chmod(0o600); err != nil { // whatever the umask
		return 0, "", err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(dst, h)}
	w, err := age.Encrypt(cw, rs...)
	if err != nil {
		return 0, "", fmt.Errorf("age-encrypt: %w (post-quantum age1pq1… and classic age1… recipients cannot be mixed in one file)", err)
	}
	if _, err := io.Copy(w, &ctxReader{ctx: ctx, r: src}); err != nil {
		return 0, "", fmt.Errorf("age-encrypt into %s: %w", out, err)
	}
	if err := w.Close(); err != nil {
		return 0, "", fmt.Errorf("age-encrypt into %s: %w", out, err)
	}
	if err := dst.Sync(); err != nil {
		return 0, "", fmt.Errorf("sync %s: %w", out, err)
	}
	if err := dst.Close(); err != nil {
		return 0, "", fmt.Errorf("close %s: %w", out, err)
	}
	return cw.n, hex.EncodeToString(h.Sum(nil)), nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// decryptError is a snapshot that could not be decrypted for want of a
// key (ErrNoKey) or of identities that load: the snapshot is not judged.
type decryptError struct{ err error }

func (e *decryptError) Error() string { return e.err.Error() }
func (e *decryptError) Unwrap() error { return e.err }

// openFor names the recipients a snapshot is encrypted to and what to
// pass, for the message of a key that is missing.
func openFor(where string, enc *Encryption) string {
	return fmt.Sprintf("%s is age-encrypted to %s: pass --age-identity FILE (or DEVATA_AGE_IDENTITY) with the identity of one of them (age-keygen -y FILE prints an identity file's recipient)", where, strings.Join(enc.Recipients, ", "))
}

// decryptCopy reads the stored (encrypted) snapshot from r, where it is
// known as where, and writes its clear text to w: it returns the size and
// sha256 of what was read and of what was written, for the caller to hold
// to the sidecar. A missing or wrong key is a decryptError; a ciphertext
// that does not decrypt (damaged, changed) is an error of the snapshot.
// Failures writing w are writeErrs.
func decryptCopy(ctx context.Context, r io.Reader, w io.Writer, where string, enc *Encryption, keys Keys) (stored, plain written, err error) {
	if keys == nil {
		return stored, plain, &decryptError{fmt.Errorf("%w: %s", ErrNoKey, openFor(where, enc))}
	}
	ids, from, err := keys()
	if err != nil {
		return stored, plain, &decryptError{fmt.Errorf("%s; %s", err, openFor(where, enc))}
	}
	if len(ids) == 0 {
		return stored, plain, &decryptError{fmt.Errorf("%w (none is given): %s", ErrNoKey, openFor(where, enc))}
	}
	sh, ph := sha256.New(), sha256.New()
	sc := &countReader{r: io.TeeReader(&ctxReader{ctx: ctx, r: io.LimitReader(r, snapshot.MaxSize+snapshot.MaxSize/1024+1<<20)}, sh)}
	dec, err := age.Decrypt(sc, ids...)
	var nomatch *age.NoIdentityMatchError
	switch {
	case errors.As(err, &nomatch):
		return stored, plain, &decryptError{fmt.Errorf("%w: it does not open with the %s; %s", ErrNoKey, from, openFor(where, enc))}
	case ctx.Err() != nil:
		return stored, plain, ctx.Err()
	case err != nil:
		return stored, plain, fmt.Errorf("its age header does not parse or verify (damaged, cut, or not the file backup etcd encrypted): use another copy")
	}
	pc := &countWriter{w: io.MultiWriter(&errWriter{w}, ph)}
	if _, err := io.Copy(pc, io.LimitReader(dec, snapshot.MaxSize+1)); err != nil {
		var we *writeErr
		if errors.As(err, &we) || ctx.Err() != nil {
			return stored, plain, err
		}
		return stored, plain, errors.New("its age payload does not decrypt (damaged, cut, or changed since backup etcd encrypted it): use another copy")
	}
	// what follows the payload: age refuses trailing data, so this reads
	// nothing; it counts the stored bytes to the end for the hash
	if _, err := io.Copy(io.Discard, sc); err != nil {
		return stored, plain, err
	}
	stored = written{sc.n, hex.EncodeToString(sh.Sum(nil))}
	plain = written{pc.n, hex.EncodeToString(ph.Sum(nil))}
	return stored, plain, nil
}

type written struct {
	size   int64
	sha256 string
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// checkDecrypted holds what decryptCopy read and wrote to the sidecar.
func checkDecrypted(side *Sidecar, stored, plain written) error {
	enc := side.Encryption
	switch {
	case stored.size != side.Size || stored.sha256 != side.SHA256:
		return fmt.Errorf("it is not the snapshot its sidecar describes (%d bytes, sha256 %s; the sidecar says %d bytes, sha256 %s): it changed since backup etcd wrote it; use another copy", stored.size, stored.sha256, side.Size, side.SHA256)
	case plain.size != enc.PlaintextSize || plain.sha256 != enc.PlaintextSHA256:
		return fmt.Errorf("it decrypts to %d bytes with sha256 %s where its sidecar says %d bytes, sha256 %s: not the snapshot backup etcd encrypted; use another copy", plain.size, plain.sha256, enc.PlaintextSize, enc.PlaintextSHA256)
	}
	return nil
}

// checkEncryption refuses a sidecar whose encryption devata cannot read.
func checkEncryption(where string, enc *Encryption) error {
	if enc.Format != EncryptionAge {
		return fmt.Errorf("%s is encrypted as %q, which devata does not read (it writes %q): use the devata that wrote it", where, enc.Format, EncryptionAge)
	}
	return nil
}

// DecryptSnapshot writes the clear text of the encrypted snapshot at path,
// which side (its sidecar) describes, into dir (which the caller made
// private, 0700, and removes) as a file of the same name (0600), and
// returns its path. The file at path is read as every backup (a regular
// file, no link followed); what is read must be the sidecar's size and
// sha256 and what it decrypts to the sidecar's clear-text size and
// sha256. An error wrapping ErrNoKey says no given identity opens it,
// naming its recipients and what to pass; no error quotes a key.
func DecryptSnapshot(ctx context.Context, path string, side *Sidecar, keys Keys, dir string) (string, error) {
	if side == nil || side.Encryption == nil {
		return "", fmt.Errorf("%s: its sidecar says it is not encrypted", path)
	}
	if err := checkEncryption(path, side.Encryption); err != nil {
		return "", err
	}
	rc, err := dirStore{filepath.Dir(path)}.Get(ctx, filepath.Base(path))
	if err != nil {
		return "", err
	}
	defer rc.Close()
	out := filepath.Join(dir, filepath.Base(path))
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	defer f.Close()
	stored, plain, err := decryptCopy(ctx, rc, f, path, side.Encryption, keys)
	var we *writeErr
	switch {
	case errors.As(err, &we):
		return "", fmt.Errorf("decrypt %s into %s: %w; set TMPDIR to a directory with room for it", path, dir, we.err)
	case err != nil:
		var de *decryptError
		if errors.As(err, &de) {
			return "", err
		}
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if err := checkDecrypted(side, stored, plain); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("decrypt %s into %s: %w", path, dir, err)
	}
	return out, nil
}
