package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
)

// encrypted writes plain to dir/snap.db encrypted to rs (as snapshotTo
// does) and returns its path and the sidecar backup etcd would write.
func encrypted(t testing.TB, dir string, plain []byte, rs ...age.Recipient) (string, *Sidecar) {
	t.Helper()
	clear := filepath.Join(t.TempDir(), "clear.db")
	if err := os.WriteFile(clear, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "snap.db")
	n, sum, err := encryptFile(context.Background(), clear, path, rs)
	if err != nil {
		t.Fatal(err)
	}
	ps := sha256.Sum256(plain)
	return path, &Sidecar{Snapshot: "snap.db", Size: n, SHA256: sum, Encryption: &Encryption{
		Format: EncryptionAge, Recipients: recipientNames(rs), PlaintextSize: int64(len(plain)), PlaintextSHA256: hex.EncodeToString(ps[:]),
	}}
}

func keysOf(ids ...age.Identity) Keys {
	return func() ([]age.Identity, string, error) {
		return ids, fmt.Sprintf("%d test identities", len(ids)), nil
	}
}

// DecryptSnapshot gives back the clear text only when the key opens it and
// both the stored bytes and the clear text are the sidecar's; it names the
// recipients and never an identity; the encrypted file is age's own format
// (age.Decrypt reads it) and holds nothing of the clear text.
func TestDecryptSnapshot(t *testing.T) {
	right, _ := age.GenerateX25519Identity()
	second, _ := age.GenerateX25519Identity()
	wrong, _ := age.GenerateX25519Identity()
	plain := make([]byte, 200<<10+17) // more than three of age's 64 KiB chunks
	rand.Read(plain)
	dir := t.TempDir()
	path, side := encrypted(t, dir, plain, right.Recipient(), second.Recipient())
	stored, _ := os.ReadFile(path)
	if bytes.Contains(stored, plain[:64]) || !bytes.HasPrefix(stored, []byte("age-encryption.org/v1\n")) {
		t.Fatal("the stored file is not age ciphertext")
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}

	for name, id := range map[string]*age.X25519Identity{"first": right, "second": second} {
		out := t.TempDir()
		got, err := DecryptSnapshot(context.Background(), path, side, keysOf(wrong, id), out)
		if err != nil {
			t.Fatalf("the %s recipient's identity: %v", name, err)
		}
		data, _ := os.ReadFile(got)
		if !bytes.Equal(data, plain) {
			t.Errorf("the %s recipient's identity: the clear text differs", name)
		}
	}

	tampered := bytes.Clone(stored)
	tampered[len(tampered)-40] ^= 0x01
	lying := *side
	lying.Encryption = &Encryption{Format: EncryptionAge, Recipients: side.Encryption.Recipients, PlaintextSize: side.Encryption.PlaintextSize, PlaintextSHA256: strings.Repeat("0", 64)}
	otherFormat := *side
	otherFormat.Encryption = &Encryption{Format: "gpg"}
	for what, c := range map[string]struct {
		data  []byte
		side  *Sidecar
		keys  Keys
		want  string
		noKey bool
	}{
		"no key given":   {stored, side, keysOf(), "none is given", true},
		"no Keys at all": {stored, side, nil, "is age-encrypted to", true},
		"a wrong key":    {stored, side, keysOf(wrong), "it does not open with the 1 test identities", true},
		"keys that fail": {stored, side, func() ([]age.Identity, string, error) {
			return nil, "", errors.New("age identity file F cannot be read")
		}, "F cannot be read", false},
		"tampered":       {tampered, side, keysOf(right), "its age payload does not decrypt", false},
		"cut":            {stored[:len(stored)-100], side, keysOf(right), "its age payload does not decrypt", false},
		"trailing data":  {append(bytes.Clone(stored), 'x'), side, keysOf(right), "its age payload does not decrypt", false},
		"not age":        {plain, side, keysOf(right), "its age header does not parse", false},
		"sidecar lies":   {stored, &lying, keysOf(right), "it decrypts to", false},
		"another format": {stored, &otherFormat, keysOf(right), `encrypted as "gpg"`, false},
	} {
		t.Run(what, func(t *testing.T) {
			d := t.TempDir()
			p := filepath.Join(d, "snap.db")
			if err := os.WriteFile(p, c.data, 0o600); err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			_, err := DecryptSnapshot(context.Background(), p, c.side, c.keys, out)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if errors.Is(err, ErrNoKey) != c.noKey {
				t.Errorf("errors.Is(ErrNoKey) = %v, want %v: %v", !c.noKey, c.noKey, err)
			}
			if c.noKey && !strings.Contains(err.Error(), right.Recipient().String()+", "+second.Recipient().String()) {
				t.Errorf("a missing key does not name the recipients: %v", err)
			}
			for _, id := range []*age.X25519Identity{right, second, wrong} {
				if strings.Contains(err.Error(), id.String()) {
					t.Error("an identity is in the error")
				}
			}
		})
	}
}

// BenchmarkEncryptSnapshot measures encrypting and decrypting a snapshot
// through files as backup etcd and verify do, beside a plain copy of the
// same bytes (figures for docs/scale.md; no assertion on time).
func BenchmarkEncryptSnapshot(b *testing.B) {
	id, _ := age.GenerateX25519Identity()
	plain := make([]byte, 64<<20)
	rand.Read(plain)
	dir := b.TempDir()
	clear := filepath.Join(dir, "clear.db")
	if err := os.WriteFile(clear, plain, 0o600); err != nil {
		b.Fatal(err)
	}
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for range b.N {
			src, _ := os.Open(clear)
			dst, _ := os.Create(filepath.Join(dir, "copy.db"))
			if _, err := io.Copy(dst, src); err != nil {
				b.Fatal(err)
			}
			if err := dst.Sync(); err != nil {
				b.Fatal(err)
			}
			dst.Close()
			src.Close()
		}
	})
	b.Run("encrypt", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for range b.N {
			out := filepath.Join(dir, "enc.db")
			os.Remove(out)
			if _, _, err := encryptFile(context.Background(), clear, out, []age.Recipient{id.Recipient()}); err != nil {
				b.Fatal(err)
			}
		}
	})
	path, side := encrypted(b, b.TempDir(), plain, id.Recipient())
	b.Run("decrypt", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for range b.N {
			out := b.TempDir()
			if _, err := DecryptSnapshot(context.Background(), path, side, keysOf(id), out); err != nil {
				b.Fatal(err)
			}
			os.RemoveAll(out)
		}
	})
}
